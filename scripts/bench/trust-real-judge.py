"""The judge-trust figures with the real local judge (docs/trust.md):

1. a cascade band fitted on one half of the held-out labelled set
   (tests/fixtures/meaning_match_labelled.jsonl, 191 rows) and run on the
   other half: the judge calls it saves and the error it adds against the
   --max-error asked;
2. escalation from the judge to a second local judge on the same half: calls
   and agreement with the labels per judge.

Both judges are llama-server with the project's PyPI GGUF
(scripts/env/judge-server.sh); the second runs as a second process
(REFSCORE_JUDGE_INSTANCE=second) with the same model, so the escalation shows
the mechanics and the accounting, not a bigger model's gain.

usage: trust-real-judge.py [MAX_ERROR]   (default 0.05)
env:   REFSCORE_BIN (default target/release/refscore), REFSCORE_MODEL_DIR;
       BY (default cosine): the scores the band reads, comma-separated for a
       fitted chain of tiers (e.g. token_f1,cosine,bertscore_f1);
       CONFIDENCE (e.g. 0.9): fit with calibrate-band --confidence, so each
       side is held to the upper Clopper-Pearson bound of its error and the
       band carries its guarantee; the run on the other half then checks it
       per tier (decided share, error with its bounds, held or not);
       PANEL=0 skips the escalation

The held-out half is scored with the chain first, then without it, through
one --judge-cache: the run without the chain pays only for the rows the
chain decided (its calls are counted as calls + cache hits).
"""

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
BIN = os.environ.get("REFSCORE_BIN", str(TARGET / "release" / "refscore"))
SERVER = ROOT / "scripts" / "env" / "judge-server.sh"


def start(instance=None):
    env = dict(os.environ)
    if instance:
        env["REFSCORE_JUDGE_INSTANCE"] = instance
    out = subprocess.run(["bash", str(SERVER), "start"], env=env, check=True,
                         capture_output=True, text=True).stdout
    return out.strip().splitlines()[-1]


def stop(instance=None):
    env = dict(os.environ)
    if instance:
        env["REFSCORE_JUDGE_INSTANCE"] = instance
    subprocess.run(["bash", str(SERVER), "stop"], env=env, check=False)


def run(*args):
    p = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"refscore {' '.join(map(str, args[:2]))}: exit {p.returncode}: {p.stderr}")
    return p.stdout


def summary(path):
    return json.loads(Path(str(path) + ".summary.json").read_text())


def calibration(s, metric):
    return next(c for c in s["calibration"] if c["metric"] == metric)


def main():
    max_error = float(sys.argv[1]) if len(sys.argv) > 1 else 0.05
    rows = [json.loads(line) for line in (ROOT / "tests/fixtures/meaning_match_labelled.jsonl").open()]
    random.Random(7).shuffle(rows)
    d = Path(tempfile.mkdtemp())
    halves = {"fit": rows[: len(rows) // 2], "test": rows[len(rows) // 2:]}
    for name, part in halves.items():
        pq.write_table(pa.table({k: [r[k] for r in part] for k in
                                 ("id", "category", "input", "reference", "output", "label")}),
                       d / f"{name}.parquet")
    url = start()
    second = None
    try:
        by = os.environ.get("BY", "cosine")
        confidence = os.environ.get("CONFIDENCE")
        common = ["--metrics", "cosine,bertscore_f1,token_f1,meaning_match", "--judge-reasons", "never",
                  "--gold", "meaning_match=label", "--quiet", "--overwrite",
                  "--judge-cache", d / "cache"]
        one = ["--judge-url", url, "--judge-model", "qwen-1.5b"]
        started = time.monotonic()
        run("score", d / "fit.parquet", "-o", d / "fit.result.parquet", *one, *common)
        fitted = run("calibrate-band", d / "fit.result.parquet", "--by", by,
                     "--max-error", max_error, "--json", d / "band.json",
                     *(["--confidence", confidence] if confidence else []))
        band = json.loads((d / "band.json").read_text())
        bands = band.get("judge_bands") or [band["judge_band"]]
        cmd_band = ["score", d / "test.parquet", "-o", d / "band.parquet", *one, *common,
                    *[w for b in bands for w in ("--judge-band", b)]]
        # Loud, for the printed lines of the tiers and their checks.
        printed = run(*[a for a in cmd_band if a != "--quiet"])
        run("score", d / "test.parquet", "-o", d / "plain.parquet", *one, *common)
        plain, banded = summary(d / "plain.parquet"), summary(d / "band.parquet")
        paid = lambda s: s["judge"]["calls"] - s["judge"]["retries"] + s["judge"]["cached"]
        cp, cb = calibration(plain, "meaning_match"), calibration(banded, "meaning_match")
        print(f"CPU: {subprocess.run(['lscpu'], capture_output=True, text=True).stdout.split('Model name:')[1].splitlines()[0].strip()}")
        print(f"fitted on {len(halves['fit'])} labelled rows (max error {max_error} per side):")
        print(fitted, end="")
        print(f"run on the other {len(halves['test'])} rows:")
        print("| | judge questions (calls + cache hits) | rows decided by the band | agreement with labels | band's agreement on its rows |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for name, s, c in (("judge only", plain, cp), ("with the band", banded, cb)):
            b = c.get("band")
            on_band = "-" if not b else "%.3f (%d rows; error %.3f)" % (b["agreement"], b["n"], 1 - b["agreement"])
            print(f"| {name} | {paid(s)} | {s['judge']['decided_by_band']} | "
                  f"{c['verdict']['agreement']:.3f} | {on_band} |")
        print("per tier (rows decided, share of the rows asked; each side's error on the labelled rows it decided):")
        checks = {t["source"]: t for t in cb.get("tiers", [])}
        for t in banded["judge"].get("tiers", []):
            print(f"  {t['tier']}: decided {t['decided']} ({100 * t.get('share', 0):.1f}%; {t['decided_true']} true)")
            c = checks.get(t["source"])
            for side in ("decided_false", "decided_true"):
                s = (c or {}).get(side)
                if not s or not s["labels"] and "guarantee" not in s:
                    continue
                g = s.get("guarantee")
                if g:
                    bound = (f"Clopper-Pearson [{100 * (g['error_low'] or 0):.1f}%, {100 * (g['error_high'] or 1):.1f}%] "
                             f"at {g['confidence']}: {g['status']}")
                else:
                    bound = f"Wilson 95% [{100 * s['error_low']:.1f}%, {100 * s['error_high']:.1f}%]"
                err = "-" if s["error"] is None else f"{100 * s['error']:.1f}%"
                print(f"    {side}: {s['errors']} of {s['labels']} labelled rows wrong ({err}), {bound}")
        # Each value a tier decided is a question the judge was not asked
        # (HTTP calls also count retries, which differ between runs).
        saved = banded["judge"]["decided_by_band"]
        added = cp["verdict"]["agreement"] - cb["verdict"]["agreement"]
        print(f"judge questions saved: {saved} of {paid(plain)}; HTTP calls with the chain "
              f"{banded['judge']['calls']} ({banded['judge']['retries']} retries); error added: {added:+.3f} "
              f"(agreement lost), against --max-error {max_error} per side")
        print(f"judge run time, all runs: {time.monotonic() - started:.0f} s")
        print("printed by the run with the chain:")
        print(printed, end="")
        if os.environ.get("PANEL", "1") == "0":
            return
        second = start("second")
        panel = ["--judge-url", url, "--judge-model", "qwen-1.5b", "--judge-url", second,
                 "--judge-model", "qwen-1.5b-second", "--judge-panel", "escalate"]
        run("score", d / "test.parquet", "-o", d / "panel.parquet", *panel, *common)
        s = summary(d / "panel.parquet")
        print("escalation (judge → a second local judge, same model), on the same rows:")
        print("| judge | values asked | values decided | calls | agreement with labels (its rows) |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for j in s["judge"]["panel"]["judges"]:
            c = calibration(s, f"meaning_match__{j['name']}")
            print(f"| {j['name']} | {j['values_asked']} | {j['values_decided']} | "
                  f"{j['report']['calls']} | {c['verdict']['agreement']:.3f} ({c['labels']} rows) |")
        c = calibration(s, "meaning_match")
        print(f"| panel | | | {s['judge']['calls']} | {c['verdict']['agreement']:.3f} ({c['labels']} rows) |")
    finally:
        stop()
        if second:
            stop("second")
    print(f"(files in {d})")


if __name__ == "__main__":
    main()
