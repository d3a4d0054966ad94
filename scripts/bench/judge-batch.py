#!/usr/bin/env python3
"""What `--judge-reasons` costs in batch mode, measured with a real judge.

In a batch, a reason for a failing verdict cannot follow in the same
conversation: `failures` asks every row's verdict (cut after it) in a first
batch and the whole question again, for the failing rows only, in a second;
`always` asks for verdict and reason in the first and only batch. This runs
Meaning Match over a labelled set once per mode through
`--judge-batch dir:PATH`, answering each request file with
scripts/tools/answer-batch-dir.py against the judge, and resuming until the output
is complete; it reports the batches (rounds), requests, prompt and
completion tokens each mode paid, and agreement with the labels.

Prompt tokens are counted as billed: a second batch runs hours after the
first, so no prompt cache carries over.

Usage (the judge running, e.g. `scripts/env/judge-server.sh start`):
  python scripts/bench/judge-batch.py --judge-url http://127.0.0.1:PORT/v1 \
      [--bin target/release/refscore] [--modes failures,always] [--json out.json]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "common")]
from judge import ROOT, figures, heldout_set  # noqa: E402
from refscore_scripts import cpu_model  # noqa: E402


def run(binary, url, data, out, mode, folder):
    cmd = [binary, "score", data, "-o", out, "--metrics", "meaning_match",
           "--judge-batch", f"dir:{folder}", "--judge-reasons", mode,
           "--keep", "label,category", "--quiet"]
    answer = [sys.executable, os.path.join(ROOT, "scripts/tools/answer-batch-dir.py"),
              "--judge-url", url, "--dir", folder]
    start = time.perf_counter()
    for k in range(10):
        done = subprocess.run(cmd + (["--resume"] if k else []), capture_output=True, text=True)
        if done.returncode == 0:
            break
        if done.returncode != 75:
            sys.exit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr}")
        subprocess.run(answer, check=True, capture_output=True)
    else:
        sys.exit(f"{mode}: not complete after 10 runs")
    wall = time.perf_counter() - start
    with open(out + ".summary.json", encoding="utf-8") as f:
        summary = json.load(f)
    return wall, summary, pq.read_table(out).to_pylist()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--judge-url", required=True)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/refscore"))
    ap.add_argument("--modes", default="failures,always")
    ap.add_argument("--threshold", type=float, default=0.5)
    ap.add_argument("--json")
    args = ap.parse_args()
    cpu = cpu_model()
    results = {"cpu": cpu, "modes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "heldout.parquet")
        n = heldout_set(data)
        for mode in args.modes.split(","):
            folder = os.path.join(tmp, f"box-{mode}")
            out = os.path.join(tmp, f"{mode}.parquet")
            wall, summary, rows = run(args.bin, args.judge_url, data, out, mode, folder)
            j = summary["judge"]
            f = figures(rows, args.threshold)
            f.update({
                "wall_seconds": wall,
                "batches": j["batch"]["batches"],
                "requests": j["batch"]["requests"],
                "prompt_tokens": j["prompt_tokens"],
                "completion_tokens": j["completion_tokens"],
                "reasons": sum(r["meaning_match_reason"] is not None for r in rows),
                "failures": j["failures"],
            })
            results["modes"][mode] = f
            print(f"{mode}: {f['batches']} batches, {f['requests']} requests", file=sys.stderr, flush=True)
    results["rows"] = n
    print(f"CPU: {cpu}; {n} rows (held out); P(true) threshold {args.threshold}\n")
    print("| `--judge-reasons` | batches | requests | prompt tokens | completion tokens | reasons | agreement |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for mode, f in results["modes"].items():
        print(f"| {mode} | {f['batches']} | {f['requests']} | {f['prompt_tokens']:,} | "
              f"{f['completion_tokens']:,} | {f['reasons']} | {f['agree']}/{f['rows']} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
