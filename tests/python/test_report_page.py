"""The report page in a real browser: Debian's headless Chromium opens it from
file:// with networking disabled, and the test fails on any attempted
network request or script error.

How requests and errors are seen: Chromium is driven over the DevTools
protocol on a pipe (--remote-debugging-pipe: no port, nothing listening).
With Network, Runtime, Log and Page events enabled before navigation, every
request the page attempts shows up as Network.requestWillBeSent (even one
that then fails, because the proxy is a dead port and host resolution maps
every name to nothing), every uncaught exception as Runtime.exceptionThrown,
every console error as Runtime.consoleAPICalled, and every blocked load
(the page's Content-Security-Policy) or other browser-side error as
Log.entryAdded. A canary page that does try to load an image proves the
detection works. `chromium --dump-dom` then shows the charts and tables, and
a screenshot is taken (kept under $REFSCORE_ARTIFACTS when set).
"""

import base64
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from report_data import make_pair

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("REFSCORE_BIN", str(ROOT / "target" / "release" / "refscore"))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("REFSCORE_REQUIRE_CHROMIUM"),
    reason="chromium is not installed (scripts/test.sh installs it)",
)

OFFLINE = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--proxy-server=http://127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--window-size=1280,2000",
]


class Browser:
    """A minimal DevTools client over --remote-debugging-pipe (fds 3 and 4)."""

    def __init__(self, profile):
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()

        def fds():
            # Chromium reads commands on fd 3 and writes replies on fd 4.
            # dup2 makes them inheritable; the pipes' own fds are not (PEP
            # 446), so with close_fds=False nothing else leaks.
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, *OFFLINE, f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"],
            preexec_fn=fds,
            close_fds=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.buf = b""
        self.next_id = 0
        self.events = []

    def _read(self):
        while b"\0" not in self.buf:
            chunk = os.read(self.from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the pipe")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method, session=None, **params):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        while True:
            m = self._read()
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method, timeout=30):
        end = time.time() + timeout
        while time.time() < end:
            for e in self.events:
                if e.get("method") == method:
                    return e
            self.events.append(self._read())
        raise TimeoutError(method)

    def open(self, url):
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        s = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Network", "Runtime", "Log", "Page"):
            self.call(f"{domain}.enable", session=s)
        self.events.clear()
        self.call("Page.navigate", session=s, url=url)
        self.wait_event("Page.loadEventFired")
        # Let anything the page might start after load show up.
        self.call("Runtime.evaluate", session=s, expression="new Promise(r => setTimeout(r, 500))",
                  awaitPromise=True)
        return s

    def problems(self, url):
        """Requests other than the page itself, script and console errors."""
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Network.requestWillBeSent" and p["request"]["url"] != url:
                out.append(f"request: {p['request']['url']}")
            elif m == "Runtime.exceptionThrown":
                out.append(f"exception: {p['exceptionDetails'].get('text')}")
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(f"console: {p.get('args')}")
            elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
                out.append(f"log: {p['entry'].get('text')}")
        return out

    def close(self):
        try:
            self.call("Browser.close")
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    d = tmp_path_factory.mktemp("page")
    base, cur = make_pair(d, n=5000)
    html = d / "report.html"
    subprocess.run(
        [BIN, "report", str(cur), "--baseline", str(base), "--by", "category", "-o", str(html),
         "--json", str(d / "report.json"), "--quiet"],
        check=True,
    )
    return d, html, json.loads((d / "report.json").read_text())


@pytest.fixture()
def browser(tmp_path):
    b = Browser(tmp_path / "profile")
    yield b
    b.close()


def test_the_page_loads_nothing_and_raises_no_error(page, browser):
    d, html, r = page
    url = html.as_uri()
    s = browser.open(url)
    assert browser.problems(url) == []
    count = browser.call("Runtime.evaluate", session=s,
                         expression="document.querySelectorAll('figure.chart svg').length")["result"]["value"]
    metrics = len(r["metrics"])
    # A histogram per metric, the per-metric change chart, a slice chart per metric.
    assert count == 2 * metrics + 1
    shot = browser.call("Page.captureScreenshot", session=s, format="png", captureBeyondViewport=True)
    png = base64.b64decode(shot["data"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    (d / "report.png").write_bytes(png)
    if os.environ.get("REFSCORE_ARTIFACTS"):
        out = Path(os.environ["REFSCORE_ARTIFACTS"])
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy(d / "report.png", out / "report.png")
        shutil.copy(html, out / "report.html")


def test_the_detector_sees_requests_and_errors(tmp_path, browser):
    # A page that tries the network and throws: the check above must fail on it.
    canary = tmp_path / "canary.html"
    canary.write_text(
        '<!DOCTYPE html><html><body><img src="http://example.com/x.png">'
        "<script>throw new Error('boom')</script></body></html>"
    )
    url = canary.as_uri()
    browser.open(url)
    found = browser.problems(url)
    assert any(f.startswith("request: http://example.com/x.png") for f in found), found
    assert any(f.startswith("exception:") for f in found), found


def test_dump_dom_shows_every_chart_and_table(page, tmp_path):
    d, html, r = page
    dom = subprocess.run(
        [CHROMIUM, *OFFLINE, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", html.as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    for m in r["metrics"]:
        name = m["name"]
        assert f'id="chart-hist-{name}"' in dom
        assert f'id="chart-slices-{name}"' in dom
        for table in (f"slices-{name}", f"flips-down-{name}", f"flips-up-{name}", f"lowest-{name}"):
            assert f'data-table="{table}"' in dom, table
        assert m["change"]["line"] in dom
    assert 'id="chart-forest"' in dom
    for table in ("metrics", "verdicts", "status", "join", "status-changes", "errors"):
        assert f'data-table="{table}"' in dom, table
    assert dom.count("<svg") == 2 * len(r["metrics"]) + 1
    assert "<script" not in dom.lower()


def test_the_labels_section_loads_nothing_and_shows_its_figures(tmp_path, browser):
    # A result with human labels (test_calibration.py's generator).
    from test_calibration import make_result

    make_result(tmp_path / "result.parquet")
    html = tmp_path / "labels.html"
    subprocess.run(
        [BIN, "report", str(tmp_path / "result.parquet"), "-o", str(html), "--quiet",
         "--gold", "meaning_match=human_verdict", "--gold", "similarity=human_score"],
        check=True,
    )
    url = html.as_uri()
    s = browser.open(url)
    assert browser.problems(url) == []
    ev = lambda js: browser.call("Runtime.evaluate", session=s, expression=js)["result"]["value"]
    assert ev("document.querySelectorAll('#chart-reliability-meaning_match svg').length") == 1
    assert ev("document.querySelectorAll('[data-table=labels] tr').length") == 3
    # The disagreeing rows: the first 50 of the verdict's, and the score's.
    assert ev("document.querySelectorAll('[data-table=disagreements-meaning_match] tr').length") == 51
    assert ev("document.querySelectorAll('[data-table=disagreements-similarity] tr').length") > 1


def test_the_tiers_guarantees_show_on_the_page(tmp_path, browser):
    """A tier whose band carries a guarantee: its line on the page, read in
    the browser, gives the tier's decided share, each side's Clopper-Pearson
    bounds at the band's confidence and whether the guarantee held."""
    from statsmodels.stats.proportion import proportion_confint
    from test_calibration import TIER_GUARANTEE, make_tiered_result

    table, labelled, truth, above, below = make_tiered_result(tmp_path / "result.parquet")
    html = tmp_path / "tiers.html"
    subprocess.run(
        [BIN, "report", str(tmp_path / "result.parquet"), "-o", str(html), "--quiet",
         "--gold", "meaning_match=human_verdict"],
        check=True,
    )
    url = html.as_uri()
    s = browser.open(url)
    assert browser.problems(url) == []
    ev = lambda js: browser.call("Runtime.evaluate", session=s, expression=js)["result"]["value"]
    line = ev("document.querySelector('[data-tier=\"band:cosine\"]').innerText")
    decided = int((above | below).sum())
    assert f"decided {decided:,} values of the run, {100 * decided / len(truth):.1f}%" in line, line
    assert "guaranteed error at most 5.0% at 90.0% confidence (both)" in line, line
    conf = TIER_GUARANTEE["confidence"]
    rows = labelled & above
    errors = int((truth[rows] != True).sum())  # noqa: E712
    low, high = proportion_confint(errors, int(rows.sum()), alpha=2 * (1 - conf), method="beta")
    assert f"Clopper-Pearson [{100 * low:.1f}%, {100 * high:.1f}%] at 90.0% each end): guarantee held" in line, line
    assert "guarantee not held" in line, line
    assert ev("document.querySelectorAll('.guarantee-held').length") == 1
    assert ev("document.querySelectorAll('.guarantee-not_held').length") == 1
