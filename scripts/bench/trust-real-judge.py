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
       PANEL=0 skips the escalation
"""

import json
import os
import random
import subprocess
import sys
import tempfile
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
        common = ["--metrics", "cosine,bertscore_f1,token_f1,meaning_match", "--judge-reasons", "never",
                  "--gold", "meaning_match=label", "--quiet", "--overwrite"]
        one = ["--judge-url", url, "--judge-model", "qwen-1.5b"]
        run("score", d / "fit.parquet", "-o", d / "fit.result.parquet", *one, *common)
        fitted = run("calibrate-band", d / "fit.result.parquet", "--by", by,
                     "--max-error", max_error, "--json", d / "band.json")
        band = json.loads((d / "band.json").read_text())
        bands = band.get("judge_bands") or [band["judge_band"]]
        run("score", d / "test.parquet", "-o", d / "plain.parquet", *one, *common)
        run("score", d / "test.parquet", "-o", d / "band.parquet", *one, *common,
            *[w for b in bands for w in ("--judge-band", b)])
        plain, banded = summary(d / "plain.parquet"), summary(d / "band.parquet")
        cp, cb = calibration(plain, "meaning_match"), calibration(banded, "meaning_match")
        print(f"CPU: {subprocess.run(['lscpu'], capture_output=True, text=True).stdout.split('Model name:')[1].splitlines()[0].strip()}")
        print(f"fitted on {len(halves['fit'])} labelled rows (max error {max_error} per side):")
        print(fitted, end="")
        print(f"run on the other {len(halves['test'])} rows:")
        print("| | judge calls | rows decided by the band | agreement with labels | band's agreement on its rows |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for t in banded["judge"].get("tiers", []):
            print(f"tier {t['tier']}: decided {t['decided']} ({t['decided_true']} true)")
        for name, s, c in (("judge only", plain, cp), ("with the band", banded, cb)):
            b = c.get("band")
            on_band = "-" if not b else "%.3f (%d rows; error %.3f)" % (b["agreement"], b["n"], 1 - b["agreement"])
            print(f"| {name} | {s['judge']['calls']} | {s['judge']['decided_by_band']} | "
                  f"{c['verdict']['agreement']:.3f} | {on_band} |")
        saved = plain["judge"]["calls"] - banded["judge"]["calls"]
        added = cp["verdict"]["agreement"] - cb["verdict"]["agreement"]
        print(f"calls saved: {saved} of {plain['judge']['calls']}; error added: {added:+.3f} "
              f"(agreement lost), against --max-error {max_error} per side")
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
