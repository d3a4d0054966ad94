"""Inputs in an object store, read through the S3 protocol from moto's
server on 127.0.0.1 (object_store's own CI also tests against an emulator):
the same files scored from local disk and from the store give identical
results; a Delta table on the store reads as `deltalake` reads it; each
failure has its exit code and never shows a secret. The failures moto cannot
give (a refused secret, a connection reset mid-read) come from scripted
endpoints here.

Run through scripts/test.sh; REFSCORE_BIN names the binary.
"""

import http.client
import http.server
import json
import os
import socket
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("REFSCORE_BIN", str(ROOT / "target" / "release" / "refscore"))
MOTO = Path(os.environ.get("VIRTUAL_ENV", Path(os.sys.executable).parent.parent)) / "bin" / "moto_server"
EXAMPLE = ROOT / "examples" / "qa.parquet"
BUCKET = "nightly"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(command, port):
    """Starts a server on 127.0.0.1:`port`; fails the test if it does not
    listen within 30 s."""
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail(f"{Path(command[0]).name} did not start")
            time.sleep(0.2)


def stop_server(proc):
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def store_env(endpoint, **more):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ENDPOINT_URL=endpoint,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing-secret",
        AWS_REGION="us-east-1",
    )
    env.update(more)
    return env


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server, stopped with the module (at most 30 s to start)."""
    port = free_port()
    proc = start_server([str(MOTO), "-H", "127.0.0.1", "-p", str(port)], port)
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing-secret",
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=BUCKET)
    try:
        yield endpoint, client
    finally:
        stop_server(proc)


def run(args, env, timeout=120):
    return subprocess.run([BIN, *args], capture_output=True, text=True, env=env, timeout=timeout)


def one_line(r):
    return len(r.stderr.strip().splitlines()) == 1


def test_the_same_input_from_disk_and_store_gives_identical_results(s3, tmp_path):
    endpoint, client = s3
    # Two part files with small row groups, so reads take many ranges.
    table = pq.read_table(EXAMPLE)
    half = table.num_rows // 2
    parts = [table.slice(0, half), table.slice(half)]
    local = tmp_path / "night"
    local.mkdir()
    for i, part in enumerate(parts):
        pq.write_table(part, local / f"part-{i}.parquet", row_group_size=7)
        client.upload_file(str(local / f"part-{i}.parquet"), BUCKET, f"night/part-{i}.parquet")
    client.put_object(Bucket=BUCKET, Key="night/_SUCCESS", Body=b"")
    env = store_env(endpoint)
    args = ["--metrics", "lexical", "--keep", "reference,output"]
    want = tmp_path / "local.parquet"
    r = run(["score", str(local), "-o", str(want), *args], env)
    assert r.returncode == 0, r.stderr
    for spec in (f"s3://{BUCKET}/night", f"s3://{BUCKET}/night/", f"s3://{BUCKET}/night/part-*.parquet"):
        got = tmp_path / "store.parquet"
        r = run(["score", spec, "-o", str(got), "--overwrite", *args], env)
        assert r.returncode == 0, (spec, r.stderr)
        assert pq.read_table(got).equals(pq.read_table(want)), spec
        summary = json.loads(Path(str(got) + ".summary.json").read_text())
        assert summary["rows"] == table.num_rows
        assert summary["input"] == spec
    r = run(["inspect", f"s3://{BUCKET}/night"], env)
    assert r.returncode == 0, r.stderr
    assert f"s3://{BUCKET}/night/part-1.parquet" in r.stdout
    assert f"rows: {table.num_rows}" in r.stdout


def test_a_glob_stays_in_its_folder_and_a_prefix_reads_below_it(s3):
    endpoint, client = s3
    for key in ("deep/a.parquet", "deep/sub/b.parquet", "deep/_tmp/c.parquet"):
        client.upload_file(str(EXAMPLE), BUCKET, key)
    env = store_env(endpoint)
    r = run(["inspect", f"s3://{BUCKET}/deep/*.parquet"], env)
    assert r.returncode == 0 and "files: 1" in r.stdout, r.stdout + r.stderr
    r = run(["inspect", f"s3://{BUCKET}/deep/"], env)
    assert r.returncode == 0 and "files: 2" in r.stdout, r.stdout + r.stderr
    assert "_tmp" not in r.stdout


def test_a_delta_table_on_the_store_reads_as_deltalake_reads_it(s3, tmp_path):
    endpoint, _ = s3
    url = f"s3://{BUCKET}/tables/night"
    storage = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing-secret",
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
        "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
    }

    def rows(start, n):
        ids = list(range(start, start + n))
        return pa.table({
            "id": ids,
            "reference": [f"a{i}" for i in ids],
            "output": [f"a{i}" if i % 3 else "x" for i in ids],
            "part": [i % 2 for i in ids],
        })

    write_deltalake(url, rows(0, 30), partition_by=["part"], storage_options=storage)
    write_deltalake(url, rows(30, 30), mode="append", partition_by=["part"], storage_options=storage)
    DeltaTable(url, storage_options=storage).delete("id < 10")
    write_deltalake(url, rows(100, 20), mode="overwrite", partition_by=["part"], storage_options=storage)
    env = store_env(endpoint)
    for version in (0, 1, 2, 3, None):
        out = tmp_path / f"v{version}.parquet"
        pick = [] if version is None else ["--table-version", str(version)]
        r = run(["score", url, "-o", str(out), "--metrics", "exact_match",
                 "--keep", "reference,output,part", *pick], env)
        assert r.returncode == 0, r.stderr
        got = pq.read_table(out).sort_by("id").select(["id", "reference", "output", "part"])
        want = DeltaTable(url, version=version, storage_options=storage).to_pyarrow_table()
        want = want.sort_by("id").select(["id", "reference", "output", "part"])
        assert got.to_pylist() == want.to_pylist(), version
    # A glob over the table's objects is refused, never read loose.
    r = run(["score", f"s3://{BUCKET}/tables/*/*.parquet", "-o", str(tmp_path / "x.parquet")], env)
    assert r.returncode == 78 and "Delta Lake table" in r.stderr, r.stderr


@pytest.mark.parametrize(
    "key,says",
    [
        ("night/nothing.parquet", "no Parquet objects"),
        ("nowhere/", "no Parquet objects"),
    ],
)
def test_a_missing_object_is_66(s3, tmp_path, key, says):
    endpoint, _ = s3
    out = tmp_path / "out.parquet"
    r = run(["score", f"s3://{BUCKET}/{key}", "-o", str(out)], store_env(endpoint))
    assert r.returncode == 66, r.stderr
    assert says in r.stderr and one_line(r), r.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_bucket_that_does_not_exist_is_66(s3, tmp_path):
    endpoint, _ = s3
    r = run(["score", "s3://no-such-bucket/night/", "-o", str(tmp_path / "o.parquet")],
            store_env(endpoint))
    assert r.returncode == 66, r.stderr
    assert "s3://no-such-bucket" in r.stderr and one_line(r), r.stderr


def test_an_unreachable_endpoint_is_69_after_the_retries(tmp_path):
    port = free_port()  # nothing listens there
    start = time.monotonic()
    r = run(["score", f"s3://{BUCKET}/night/", "-o", str(tmp_path / "o.parquet"),
             "--store-retries", "2"], store_env(f"http://127.0.0.1:{port}"))
    assert r.returncode == 69, r.stderr
    assert one_line(r) and "s3://nightly" in r.stderr, r.stderr
    assert time.monotonic() - start < 60


class QuietHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass


class LocalServer(http.server.ThreadingHTTPServer):
    """A scripted HTTP endpoint on 127.0.0.1, served from a daemon thread."""

    def __init__(self, handler):
        super().__init__(("127.0.0.1", 0), handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


class Scripted(LocalServer):
    """An endpoint that answers every request with one status and body."""

    def __init__(self, status, body=b""):
        class Handler(QuietHandler):
            def answer(self):
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_HEAD = do_PUT = answer

        super().__init__(Handler)


DENIED = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SignatureDoesNotMatch</Code>'
    b"<Message>The request signature we calculated does not match</Message></Error>"
)


def test_a_refused_secret_is_77_and_the_secret_never_shows(tmp_path):
    server = Scripted(403, DENIED)
    try:
        r = run(["score", f"s3://{BUCKET}/night/", "-o", str(tmp_path / "o.parquet")],
                store_env(server.url, AWS_SECRET_ACCESS_KEY="hunter2-very-secret"))
        assert r.returncode == 77, r.stderr
        assert one_line(r) and "hunter2" not in r.stderr + r.stdout, r.stderr
        # A URL that carries credentials: redacted in every message.
        secret_url = f"http://user:pa55word@127.0.0.1:{server.server_address[1]}/x.parquet?sig=t0ken"
        r = run(["score", secret_url.replace("http://", "https://"), "-o", str(tmp_path / "o.parquet"),
                 "--store-retries", "0"], store_env(server.url))
        assert r.returncode != 0
        assert "pa55word" not in r.stderr and "t0ken" not in r.stderr, r.stderr
        r = run(["inspect", secret_url], store_env(server.url))
        assert r.returncode == 77, r.stderr
        assert "pa55word" not in r.stderr and "t0ken" not in r.stderr, r.stderr
        assert list(tmp_path.iterdir()) == []
    finally:
        server.shutdown()


def test_access_carried_in_an_http_url_is_refused_saying_what_is_read(tmp_path):
    seen = []

    class Handler(QuietHandler):
        def answer(self):
            seen.append((self.command, self.path, self.headers.get("Authorization")))
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_HEAD = answer

    server = LocalServer(Handler)
    host = server.url.removeprefix("http://")
    try:
        for url in (f"http://user:pa55word@{host}/x.parquet", f"http://{host}/x.parquet?sig=t0ken",
                    f"https://user:pa55word@{host}/night/"):
            for command in (["inspect", url], ["score", url, "-o", str(tmp_path / "o.parquet")]):
                r = run(command, store_env(server.url))
                assert r.returncode == 77, (url, r.stderr)
                assert one_line(r) and "user:password@ or a signed query string" in r.stderr, r.stderr
                assert "pa55word" not in r.stderr + r.stdout and "t0ken" not in r.stderr, r.stderr
                assert "AWS_" not in r.stderr, r.stderr
    finally:
        server.shutdown()
    assert seen == [], seen  # nothing sent without the access it needs
    assert list(tmp_path.iterdir()) == []


class Proxy(LocalServer):
    """Forwards to the store, with faults: it drops the connection of the
    first `resets` ranged reads halfway through their bodies (a reset
    mid-read); with `hold_parts` it holds every multipart part upload
    until `release` is set (a run can be killed while its upload is under
    way); with `deny_writes` it refuses every write as read-only
    credentials are refused; with `list_only_under` it refuses listings of
    other prefixes (credentials scoped to one folder); `before(method,
    path, headers)` runs before
    each request is forwarded (to change the store under a run)."""

    def __init__(self, upstream, resets=0, hold_parts=False, deny_writes=False, before=None,
                 list_only_under=None):
        host, port = upstream.removeprefix("http://").split(":")
        self.state = {"left": resets, "dropped": 0}
        self.parts_seen = threading.Event()
        self.release = threading.Event()
        lock = threading.Lock()
        proxy = self

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"

            def forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if hold_parts and self.command == "PUT" and "partNumber=" in self.path:
                    proxy.parts_seen.set()
                    proxy.release.wait(60)
                listing = self.command == "GET" and "list-type=2" in self.path
                prefix = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query).get("prefix", [""])[0]
                outside = list_only_under is not None and not prefix.startswith(list_only_under)
                if (deny_writes and self.command in ("PUT", "POST", "DELETE")) or (listing and outside):
                    self.send_response(403)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(DENIED)))
                    self.end_headers()
                    self.wfile.write(DENIED)
                    return
                if before is not None:
                    before(self.command, self.path, dict(self.headers.items()))
                conn = http.client.HTTPConnection(host, int(port), timeout=60)
                conn.request(self.command, self.path, body=body, headers=dict(self.headers.items()))
                resp = conn.getresponse()
                data = resp.read()
                with lock:
                    drop = "Range" in self.headers and proxy.state["left"] > 0
                    if drop:
                        proxy.state["left"] -= 1
                        proxy.state["dropped"] += 1
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection"):
                        self.send_header(k, v)
                self.end_headers()
                if drop:
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                    )
                    self.close_connection = True
                    return
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = forward

        super().__init__(Handler)


def test_a_connection_reset_mid_read_is_retried(s3, tmp_path):
    endpoint, client = s3
    table = pq.read_table(EXAMPLE)
    local = tmp_path / "one.parquet"
    pq.write_table(table, local, row_group_size=5)
    client.upload_file(str(local), BUCKET, "reset/one.parquet")
    want = tmp_path / "want.parquet"
    assert run(["score", str(local), "-o", str(want), "--metrics", "lexical"], os.environ).returncode == 0
    proxy = Proxy(endpoint, resets=3)
    try:
        got = tmp_path / "got.parquet"
        r = run(["score", f"s3://{BUCKET}/reset/one.parquet", "-o", str(got), "--metrics", "lexical"],
                store_env(proxy.url))
        assert r.returncode == 0, r.stderr
        assert proxy.state["dropped"] == 3
        assert pq.read_table(got).equals(pq.read_table(want))
    finally:
        proxy.shutdown()


def test_a_result_goes_to_the_store_whole_with_its_summary(s3, tmp_path):
    endpoint, client = s3
    env = store_env(endpoint)
    url = f"s3://{BUCKET}/scores/night.parquet"
    local = tmp_path / "local.parquet"
    assert run(["score", str(EXAMPLE), "-o", str(local), "--metrics", "lexical"], env).returncode == 0
    args = ["score", str(EXAMPLE), "-o", url, "--metrics", "lexical", "--run-dir", str(tmp_path / "run")]
    r = run(args, env)
    assert r.returncode == 0, r.stderr
    assert url in r.stdout and url + ".summary.json" in r.stdout
    got = tmp_path / "got.parquet"
    client.download_file(BUCKET, "scores/night.parquet", str(got))
    assert pq.read_table(got).equals(pq.read_table(local))
    # Polars reads it back from the store, as the README says.
    import polars as pl

    options = {"aws_endpoint_url": endpoint, "aws_access_key_id": "testing",
               "aws_secret_access_key": "testing-secret", "aws_region": "us-east-1", "aws_allow_http": "true"}
    back = pl.read_parquet(url, storage_options=options)
    assert back.to_arrow().equals(pq.read_table(local).cast(back.to_arrow().schema))
    summary = json.loads(client.get_object(Bucket=BUCKET, Key="scores/night.parquet.summary.json")["Body"].read())
    assert summary["output"] == url and summary["rows"] == pq.read_metadata(local).num_rows
    # An existing result is refused before any work, and --overwrite replaces it.
    r = run(args, env)
    assert r.returncode == 78 and "--overwrite" in r.stderr and one_line(r), r.stderr
    assert run([*args, "--overwrite"], env).returncode == 0
    # A local output has its run folder beside it: --run-dir is refused there.
    r = run(["score", str(EXAMPLE), "-o", str(tmp_path / "x.parquet"), "--run-dir", str(tmp_path)], env)
    assert r.returncode == 78 and "--run-dir" in r.stderr, r.stderr


def kill_during_upload(endpoint, args):
    """Runs refscore ARGS through a proxy that holds the upload's parts, and
    kills it (kill -9) once the first part has reached the proxy."""
    proxy = Proxy(endpoint, hold_parts=True)
    try:
        proc = subprocess.Popen([BIN, *args], env=store_env(proxy.url),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert proxy.parts_seen.wait(120), "the upload never started"
        proc.kill()
        proc.wait(30)
    finally:
        proxy.release.set()
        proxy.shutdown()


def test_kill_9_during_the_upload_leaves_nothing_at_the_key_and_resume_finishes(s3, tmp_path):
    endpoint, client = s3
    # A result of about 20 MB (hex text does not compress), so it goes up in parts.
    n = 60_000
    ids = list(range(n))
    text = [os.urandom(80).hex() for _ in ids]
    src = tmp_path / "big.parquet"
    pq.write_table(pa.table({"id": ids, "reference": text, "output": text[1:] + text[:1]}), src)
    url = f"s3://{BUCKET}/scores/big.parquet"
    args = ["score", str(src), "-o", url, "--metrics", "exact_match", "--keep", "reference,output",
            "--run-dir", str(tmp_path / "run")]
    kill_during_upload(endpoint, args)
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix="scores/big")
    assert listed.get("KeyCount", 0) == 0, listed
    r = run([*args, "--resume"], store_env(endpoint))
    assert r.returncode == 0, r.stderr
    assert "uploaded" in r.stderr, r.stderr
    got = tmp_path / "got.parquet"
    client.download_file(BUCKET, "scores/big.parquet", str(got))
    table = pq.read_table(got)
    assert table.num_rows == n
    assert table.equals(pq.read_table(tmp_path / "run" / "big.parquet"))
    assert client.head_object(Bucket=BUCKET, Key="scores/big.parquet.summary.json")


def delta_storage(endpoint):
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing-secret",
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
        "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
    }


def test_resume_with_nothing_to_resume_never_replaces_another_runs_result(s3, tmp_path):
    endpoint, client = s3
    env = store_env(endpoint)
    key = "resume-fresh/night.parquet"
    url = f"s3://{BUCKET}/{key}"
    base = ["score", str(EXAMPLE), "-o", url]
    r = run([*base, "--metrics", "lexical", "--run-dir", str(tmp_path / "a")], env)
    assert r.returncode == 0, r.stderr
    tag = client.head_object(Bucket=BUCKET, Key=key)["ETag"]
    # Another run (other metrics) in a fresh container: nothing of it to
    # resume there, so the result in the store is refused as without --resume.
    fresh = tmp_path / "b"
    r = run([*base, "--metrics", "exact_match", "--resume", "--run-dir", str(fresh)], env)
    assert r.returncode == 78 and "--overwrite" in r.stderr and one_line(r), r.stderr
    assert client.head_object(Bucket=BUCKET, Key=key)["ETag"] == tag
    assert not (fresh / "night.parquet").exists()
    # The same run elsewhere: the store holds its finished result; no work.
    fresh = tmp_path / "c"
    r = run([*base, "--metrics", "lexical", "--resume", "--run-dir", str(fresh)], env)
    assert r.returncode == 0, r.stderr
    assert "nothing to do" in r.stderr and url in r.stderr, r.stderr
    assert client.head_object(Bucket=BUCKET, Key=key)["ETag"] == tag
    assert not (fresh / "night.parquet").exists()
    # --overwrite still replaces it.
    r = run([*base, "--metrics", "exact_match", "--resume", "--overwrite",
             "--run-dir", str(tmp_path / "d")], env)
    assert r.returncode == 0, r.stderr
    assert client.head_object(Bucket=BUCKET, Key=key)["ETag"] != tag


def test_an_object_replaced_during_the_run_fails_instead_of_mixing_versions(s3, tmp_path):
    endpoint, client = s3
    n, group = 24_000, 6_000
    ids = list(range(n))

    def version(letter):
        # Same lengths, no dictionary, no compression, no statistics: both
        # versions lay their pages at the same offsets, so the old footer
        # reads the new bytes without a decode error.
        path = tmp_path / f"{letter}.parquet"
        table = pa.table({"id": ids, "reference": [f"{i:0120d}" for i in ids],
                          "output": [f"{letter * 8}{i:0112d}" for i in ids]})
        pq.write_table(table, path, row_group_size=group, use_dictionary=False,
                       compression="none", write_statistics=False)
        return path

    old, new = version("a"), version("b")
    assert old.stat().st_size == new.stat().st_size
    key = "replaced/night.parquet"
    client.upload_file(str(old), BUCKET, key)
    size = old.stat().st_size
    seen = {"data": 0}

    def before(method, path, headers):
        # After the footer (the tail of the object) and the first row
        # group, the object is replaced.
        rng = headers.get("Range") or headers.get("range")
        if method != "GET" or not rng or key not in path:
            return
        start = int(rng.removeprefix("bytes=").split("-")[0])
        if 4 <= start < size - 64 * 1024:
            seen["data"] += 1
            if seen["data"] == 2:
                client.upload_file(str(new), BUCKET, key)

    proxy = Proxy(endpoint, before=before)
    try:
        out = tmp_path / "o.parquet"
        r = run(["score", f"s3://{BUCKET}/{key}", "-o", str(out), "--metrics", "exact_match",
                 "--keep", "output"], store_env(proxy.url))
    finally:
        proxy.shutdown()
    assert seen["data"] >= 2, seen
    mixed = "" if not out.exists() else str(pq.read_table(out).column("output")[n - 1])
    assert r.returncode == 74, (r.returncode, r.stderr, mixed[:20])
    assert "replaced while" in r.stderr and one_line(r), r.stderr
    assert not out.exists()


def test_a_missing_or_read_only_output_bucket_is_found_before_any_work(s3, tmp_path):
    endpoint, _ = s3
    run_dir = tmp_path / "run"
    r = run(["score", str(EXAMPLE), "-o", "s3://no-such-output-bucket/night.parquet",
             "--metrics", "lexical", "--run-dir", str(run_dir)], store_env(endpoint))
    assert r.returncode == 66, r.stderr
    assert "s3://no-such-output-bucket/night.parquet" in r.stderr and one_line(r), r.stderr
    assert not (run_dir / "night.parquet").exists()
    proxy = Proxy(endpoint, deny_writes=True)
    try:
        r = run(["score", str(EXAMPLE), "-o", f"s3://{BUCKET}/read-only/night.parquet",
                 "--metrics", "lexical", "--run-dir", str(run_dir), "--store-retries", "0"],
                store_env(proxy.url, AWS_SECRET_ACCESS_KEY="hunter2-very-secret"))
    finally:
        proxy.shutdown()
    assert r.returncode == 77, r.stderr
    assert one_line(r) and "hunter2" not in r.stderr, r.stderr
    assert not (run_dir / "night.parquet").exists()


def test_a_delta_table_with_deletion_vectors_reads_on_the_store_as_locally(s3, tmp_path):
    # The table of test_delta_tables' deletion-vector test, its vectors in
    # their own file, uploaded: the store's reads apply them as local ones.
    from test_delta_tables import delete_rows, expected_rows, ids_at, live_adds, result_rows
    from test_delta_tables import rows as delta_rows
    from deltalake import WriterProperties

    endpoint, client = s3
    local = tmp_path / "night"
    write_deltalake(str(local), delta_rows(0, 40), writer_properties=WriterProperties(max_row_group_size=16))
    (only,) = live_adds(local, 0)
    delete_rows(local, 1, {only: [0, 16, 17, 39]}, stored=True)
    for f in local.rglob("*"):
        if f.is_file():
            client.upload_file(str(f), BUCKET, f"dv/night/{f.relative_to(local)}")
    gone = ids_at(local, only, [0, 16, 17, 39])
    before = expected_rows(DeltaTable(str(local), version=0))
    env = store_env(endpoint)
    for version, want in [(None, [r for r in before if r["id"] not in gone]), (0, before)]:
        out = tmp_path / f"v{version}.parquet"
        pick = [] if version is None else ["--table-version", str(version)]
        r = run(["score", f"s3://{BUCKET}/dv/night", "-o", str(out), "--metrics", "exact_match",
                 "--keep", "reference,output,day", *pick], env)
        assert r.returncode == 0, r.stderr
        assert result_rows(out) == want, version
    assert len(want) == 40 and len(gone) == 4


@pytest.mark.parametrize("mode", ["name", "id"])
def test_a_column_mapped_table_reads_on_the_store_as_locally(s3, tmp_path, mode):
    # test_delta_tables' column-mapped table with its renamed column,
    # uploaded: the store's reads find the columns by their logical names.
    from test_delta_tables import query_rows, rename
    from test_delta_tables import rows as delta_rows

    endpoint, client = s3
    local = tmp_path / "mapped"
    config = {"delta.columnMapping.mode": mode, "delta.minReaderVersion": "2",
              "delta.minWriterVersion": "5"}
    write_deltalake(str(local), delta_rows(0, 30), partition_by=["day"], configuration=config)
    write_deltalake(str(local), delta_rows(30, 10), mode="append", partition_by=["day"])
    rename(local, 2, "output", "answer")
    for f in local.rglob("*"):
        if f.is_file():
            client.upload_file(str(f), BUCKET, f"mapped-{mode}/{f.relative_to(local)}")
    env = store_env(endpoint)
    for version, output in [(None, "answer"), (1, "output")]:
        out = tmp_path / f"v{version}.parquet"
        pick = [] if version is None else ["--table-version", str(version)]
        r = run(["score", f"s3://{BUCKET}/mapped-{mode}", "-o", str(out), "--metrics",
                 "exact_match", "--output-col", output, "--keep", f"reference,{output},day",
                 *pick], env)
        assert r.returncode == 0, r.stderr
        want = query_rows(local, version)
        got = pq.read_table(out).sort_by("id").to_pylist()
        assert len(got) == len(want) == 40
        for g, w in zip(got, want, strict=True):
            assert (g["id"], g["reference"], g[output], g["day"]) == \
                (w["id"], w["reference"], w[output], w["day"])
            assert g["exact_match"] == (w["reference"] == w[output])


def test_a_tables_folders_on_the_store_are_refused_as_they_are_locally(s3, tmp_path):
    endpoint, client = s3
    env = store_env(endpoint)
    storage = delta_storage(endpoint)
    table = f"s3://{BUCKET}/loose/night"
    ids = list(range(40))
    write_deltalake(table, pa.table({"id": ids, "reference": [f"a{i}" for i in ids],
                                     "output": [f"a{i}" for i in ids], "part": [i % 2 for i in ids]}),
                    partition_by=["part"], storage_options=storage)
    DeltaTable(table, storage_options=storage).delete("id < 30")
    out = tmp_path / "o.parquet"
    for spec in (f"{table}/part=0/", f"{table}/part=0", f"{table}/part=0/*.parquet"):
        r = run(["score", spec, "-o", str(out), "--metrics", "exact_match"], env)
        assert r.returncode == 78, (spec, r.returncode, r.stderr)
        assert "Delta Lake table" in r.stderr and f"({table})" in r.stderr and one_line(r), r.stderr
    # The table itself reads at its version: 10 rows, not the 40 its files hold.
    r = run(["score", table, "-o", str(out), "--metrics", "exact_match"], env)
    assert r.returncode == 0, r.stderr
    assert pq.read_metadata(out).num_rows == 10
    # An Iceberg table: its folder is the table (read since issue 68; this
    # one's metadata is not a table's), and a folder holding it, its data
    # folder and a glob over its files are refused.
    for name in ("a", "b"):
        client.upload_file(str(EXAMPLE), BUCKET, f"ice/night/data/{name}.parquet")
    client.put_object(Bucket=BUCKET, Key="ice/night/metadata/v1.metadata.json", Body=b"{}")
    r = run(["score", f"s3://{BUCKET}/ice/night/", "-o", str(tmp_path / "x.parquet")], env)
    assert r.returncode == 65 and "cannot read the Iceberg table" in r.stderr and one_line(r), r.stderr
    for spec in ("ice/", "ice/night/data/", "ice/night/data/*.parquet"):
        r = run(["score", f"s3://{BUCKET}/{spec}", "-o", str(tmp_path / "x.parquet")], env)
        assert r.returncode == 78, (spec, r.returncode, r.stderr)
        assert "Iceberg table" in r.stderr and f"(s3://{BUCKET}/ice/night)" in r.stderr and one_line(r), r.stderr
    # Credentials that may list only the input's folder cannot look above
    # it: that is no table found, and the folder is read as before.
    client.upload_file(str(EXAMPLE), BUCKET, "scoped/night/a.parquet")
    proxy = Proxy(endpoint, list_only_under="scoped/night/")
    try:
        r = run(["inspect", f"s3://{BUCKET}/scoped/night/"], store_env(proxy.url))
    finally:
        proxy.shutdown()
    assert r.returncode == 0 and "files: 1" in r.stdout, r.stdout + r.stderr
    # A plain folder with a metadata folder of its own is read as before.
    client.upload_file(str(EXAMPLE), BUCKET, "plain/night/a.parquet")
    client.put_object(Bucket=BUCKET, Key="plain/night/metadata/run.metadata.json", Body=b"{}")
    r = run(["inspect", f"s3://{BUCKET}/plain/night/"], env)
    assert r.returncode == 0 and "files: 1" in r.stdout, r.stdout + r.stderr


def test_a_multipart_upload_killed_midway_is_aborted_by_the_next_run(s3, tmp_path):
    endpoint, client = s3
    n = 60_000
    ids = list(range(n))
    text = [os.urandom(80).hex() for _ in ids]
    src = tmp_path / "big.parquet"
    pq.write_table(pa.table({"id": ids, "reference": text, "output": text[1:] + text[:1]}), src)
    key = "scores/aborted.parquet"

    def uploads():
        listed = client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])
        return [u["UploadId"] for u in listed if u["Key"] == key]

    args = ["score", str(src), "-o", f"s3://{BUCKET}/{key}", "--metrics", "exact_match",
            "--keep", "reference,output", "--run-dir", str(tmp_path / "run")]
    kill_during_upload(endpoint, args)
    left = uploads()
    assert len(left) == 1, left  # its parts are billed until it is aborted
    r = run([*args, "--resume"], store_env(endpoint))
    assert r.returncode == 0, r.stderr
    assert uploads() == [], "the killed run's upload is still open"
    assert pq.read_metadata(tmp_path / "run" / "aborted.parquet").num_rows == n
    assert client.head_object(Bucket=BUCKET, Key=key)
    assert not list((tmp_path / "run").glob(".*multipart-upload"))


AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@pytest.fixture(scope="module")
def azurite():
    """Azurite's blob service (REFSCORE_AZURITE: scripts/env/azurite.sh), in
    memory, stopped with the module; skipped only outside scripts/test.sh."""
    binary = os.environ.get("REFSCORE_AZURITE")
    if not binary:
        pytest.skip("REFSCORE_AZURITE unset: scripts/test.sh installs Azurite and sets it")
    from azure.storage.blob import BlobServiceClient

    port = free_port()
    proc = start_server([binary, "--blobHost", "127.0.0.1", "--blobPort", str(port),
                         "--inMemoryPersistence", "--silent", "--skipApiVersionCheck"], port)
    endpoint = f"http://127.0.0.1:{port}"
    conn = (f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={AZURITE_KEY};"
            f"BlobEndpoint={endpoint}/devstoreaccount1;")
    client = BlobServiceClient.from_connection_string(conn)
    client.create_container(BUCKET)
    try:
        yield endpoint, client
    finally:
        stop_server(proc)


def test_azure_reads_and_writes_as_s3_does(azurite, tmp_path):
    endpoint, client = azurite
    with open(EXAMPLE, "rb") as f:
        client.get_blob_client(BUCKET, "night/qa.parquet").upload_blob(f)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AZURE_"))}
    env.update(AZURE_STORAGE_USE_EMULATOR="true", AZURITE_BLOB_STORAGE_URL=endpoint)
    want = tmp_path / "local.parquet"
    assert run(["score", str(EXAMPLE), "-o", str(want), "--metrics", "lexical"], env).returncode == 0
    url = f"az://{BUCKET}/scores/night.parquet"
    r = run(["score", f"az://{BUCKET}/night/", "-o", url, "--metrics", "lexical",
             "--run-dir", str(tmp_path / "run")], env)
    assert r.returncode == 0, r.stderr
    got = tmp_path / "got.parquet"
    got.write_bytes(client.get_blob_client(BUCKET, "scores/night.parquet").download_blob().readall())
    assert pq.read_table(got).equals(pq.read_table(want))
    r = run(["inspect", f"az://{BUCKET}/missing/"], env)
    assert r.returncode == 66 and one_line(r), r.stderr


def test_the_python_package_takes_the_same_urls(s3, tmp_path, monkeypatch):
    if os.environ.get("REFSCORE_REQUIRE_PACKAGE"):
        import refscore
    else:
        refscore = pytest.importorskip("refscore")
    from refscore._shards import input_location

    endpoint, client = s3
    for k, v in store_env(endpoint).items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    client.upload_file(str(EXAMPLE), BUCKET, "py/qa.parquet")
    url = f"s3://{BUCKET}/py-scores/qa.parquet"
    summary = refscore.score_parquet(f"s3://{BUCKET}/py/", url, metrics=["lexical"],
                                     run_dir=str(tmp_path / "run"), quiet=True)
    assert summary["rows"] == pq.read_metadata(EXAMPLE).num_rows
    assert summary["output"] == url
    assert client.head_object(Bucket=BUCKET, Key="py-scores/qa.parquet")
    with pytest.raises(refscore.RefscoreError) as e:
        refscore.score_parquet(f"s3://{BUCKET}/nothing-here/", str(tmp_path / "x.parquet"))
    assert e.value.exit_code == 66
    # The Ray and Spark job modes hand every worker a URL as it is.
    assert input_location(f"s3://{BUCKET}/py/") == f"s3://{BUCKET}/py/"
    assert input_location("night") == os.path.abspath("night")
