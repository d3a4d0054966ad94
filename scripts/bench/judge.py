#!/usr/bin/env python3
"""Meaning Match on a real judge, per `--judge-reasons` mode, side by side:
agreement with hand labels, a calibration table of `meaning_match_p`, and
seconds per judged row.

Two labelled sets:
  dev      the 59 labelled `judge` rows of examples/qa.parquet (where the
           P(true) threshold may be chosen);
  heldout  tests/fixtures/meaning_match_labelled.jsonl (191 cases, never used
           to choose anything; reported as is).

For each set, the modes run one after another through the release binary
(`refscore score --metrics meaning_match --judge-reasons MODE`), each with a
fresh output and no judge cache, so every row is a paid call. Wall time is the
binary's whole run (model-free: only the judge stage runs); seconds per judged
row = wall time / rows the summary says were judged.

Usage (the judge running, e.g. `scripts/env/judge-server.sh start`):
  python scripts/bench/judge.py --judge-url http://127.0.0.1:PORT/v1 \
      [--bin target/release/refscore] [--modes always,failures,never] \
      [--threshold 0.5] [--json results.json]
Prints markdown tables; `--json` also writes every figure.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "common"))
from refscore_scripts import REPO as ROOT, cpu_model  # noqa: E402

BINS = [(0.0, 0.1), (0.1, 0.3), (0.3, 0.5), (0.5, 0.7), (0.7, 0.9), (0.9, 1.0001)]


def dev_set(path):
    t = pq.read_table(os.path.join(ROOT, "examples/qa.parquet")).to_pylist()
    rows = [r for r in t if r["judge"] and r["expected_meaning_match"] is not None]
    table = pa.table({
        "id": [r["id"] for r in rows],
        "question": [r["question"] for r in rows],
        "reference": [r["reference"] for r in rows],
        "output": [r["output"] for r in rows],
        "category": [r["category"] for r in rows],
        "label": [r["expected_meaning_match"] for r in rows],
    })
    pq.write_table(table, path)
    return len(rows)


def heldout_set(path):
    with open(os.path.join(ROOT, "tests/fixtures/meaning_match_labelled.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    table = pa.table({
        "id": [r["id"] for r in rows],
        "question": [r["input"] for r in rows],
        "reference": [r["reference"] for r in rows],
        "output": [r["output"] for r in rows],
        "category": [r["category"] for r in rows],
        "label": [r["label"] for r in rows],
    })
    pq.write_table(table, path)
    return len(rows)


def run(binary, url, data, out, mode, extra):
    cmd = [binary, "score", data, "-o", out, "--metrics", "meaning_match",
           "--judge-url", url, "--judge-reasons", mode, "--keep", "label,category",
           "--overwrite", "--quiet"] + extra
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr}")
    with open(out + ".summary.json", encoding="utf-8") as f:
        summary = json.load(f)
    return wall, summary, pq.read_table(out).to_pylist()


def figures(rows, threshold):
    judged = [r for r in rows if r["meaning_match_source"] == "judge"]
    decided = [r for r in rows if r["meaning_match"] is not None]

    def verdict(r):
        p = r.get("meaning_match_p")
        if r["meaning_match_source"] == "judge" and p is not None:
            return p >= threshold
        return r["meaning_match"]

    agree = sum(verdict(r) == r["label"] for r in decided)
    calibration = []
    for lo, hi in BINS:
        inside = [r for r in judged if r.get("meaning_match_p") is not None and lo <= r["meaning_match_p"] < hi]
        calibration.append({
            "bin": f"{lo:.1f}–{min(hi, 1.0):.1f}",
            "rows": len(inside),
            "labelled_true": sum(r["label"] for r in inside),
        })
    misses = [r["id"] for r in decided if verdict(r) != r["label"]]
    return {
        "rows": len(decided),
        "judged": len(judged),
        "agree": agree,
        "agreement": agree / len(decided) if decided else None,
        "calibration": calibration,
        "misses": misses,
    }


def best_threshold(rows):
    """The P(true) threshold with the highest agreement on these rows (ties:
    the one nearest 0.5), searched in steps of 0.05."""
    best = None
    for k in range(1, 20):
        t = k / 20
        a = figures(rows, t)["agree"]
        key = (a, -abs(t - 0.5))
        if best is None or key > best[0]:
            best = (key, t)
    return best[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--judge-url", required=True)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/refscore"))
    ap.add_argument("--modes", default="never,failures,always")
    ap.add_argument("--sets", default="dev,heldout")
    ap.add_argument("--threshold", type=float, default=0.5)
    ap.add_argument("--json")
    args = ap.parse_args()
    cpu = cpu_model()
    results = {"cpu": cpu, "threshold": args.threshold, "sets": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.sets.split(","):
            data = os.path.join(tmp, f"{name}.parquet")
            n = (dev_set if name == "dev" else heldout_set)(data)
            per_mode = {}
            for mode in args.modes.split(","):
                out = os.path.join(tmp, f"{name}-{mode}.parquet")
                wall, summary, rows = run(args.bin, args.judge_url, data, out, mode, [])
                j = summary["judge"]
                f = figures(rows, args.threshold)
                f.update({
                    "wall_seconds": wall,
                    "seconds_per_judged_row": wall / max(j["rows_judged"], 1),
                    "calls": j["calls"],
                    "reasons_asked": j.get("reasons_asked", 0),
                    "prompt_tokens": j["prompt_tokens"],
                    "prompt_tokens_cached": j.get("prompt_tokens_cached", 0),
                    "completion_tokens": j["completion_tokens"],
                    "best_threshold_here": best_threshold(rows),
                })
                per_mode[mode] = f
                print(f"{name} {mode}: {f['agree']}/{f['rows']} agree, "
                      f"{f['seconds_per_judged_row']:.2f} s per judged row", file=sys.stderr, flush=True)
            results["sets"][name] = {"rows": n, "modes": per_mode}
    print(f"CPU: {cpu}; P(true) threshold {args.threshold}\n")
    print("| set | mode | agreement | s per judged row | calls | reasons | prompt tokens (cached) | completion tokens |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, s in results["sets"].items():
        for mode, f in s["modes"].items():
            print(f"| {name} | {mode} | {f['agree']}/{f['rows']} ({100 * f['agreement']:.1f}%) | "
                  f"{f['seconds_per_judged_row']:.2f} | {f['calls']} | {f['reasons_asked']} | "
                  f"{f['prompt_tokens']} ({f['prompt_tokens_cached']}) | {f['completion_tokens']} |")
    print("\nCalibration (judged rows by meaning_match_p; share labelled true):\n")
    for name, s in results["sets"].items():
        for mode, f in s["modes"].items():
            cells = ", ".join(
                f"{c['bin']}: {c['labelled_true']}/{c['rows']}" for c in f["calibration"])
            print(f"- {name}, {mode}: {cells}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
