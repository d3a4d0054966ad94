#!/usr/bin/env python3
"""How far --precision bf16 and int8 move cross-encoder scores off fp32, for
each family: runs the given refscore binary on every tiny cross-encoder
fixture of tests/fixtures (cross-*.jsonl with its model folder) at fp32, bf16
and int8, and prints the largest and 99th-percentile |difference| of the
metric columns (cross_score for one-output models; nli_precision and
nli_recall, both directions' entailment probability, for NLI models).
docs/metrics.md quotes its output. Needs pyarrow.

  scripts/bench/cross-precision.py [target/release/refscore]
"""

import glob
import json
import pathlib
import subprocess
import sys
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main() -> None:
    binary = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "target/release/refscore")
    out = tempfile.mkdtemp()
    for fixture in sorted(glob.glob(str(ROOT / "tests/fixtures/cross-*.jsonl"))):
        lines = pathlib.Path(fixture).read_text().splitlines()
        header = json.loads(lines[0])["header"]
        if "model" not in header:
            continue  # the checker recipes' fixture: several twins, no one model
        rows = [json.loads(line) for line in lines[1:]]
        name = header["model"]
        inp = f"{out}/{name}.parquet"
        pq.write_table(
            pa.table({k: [r[k] for r in rows] for k in ["id", "reference", "output"]}), inp
        )
        if header["num_labels"] == 1:
            flags, columns = ["--metrics", "cross"], ["cross_score"]
        else:
            flags, columns = ["--metrics", "nli_precision,nli_recall"], ["nli_precision", "nli_recall"]
            labels = header["id2label"]
            if all(label.startswith("LABEL_") for label in labels.values()):
                flags += ["--nli-labels", "entailment=1"]  # MiniCheck's order
            elif "consistent" in labels.values():  # HHEM's names
                index = next(i for i, label in labels.items() if label == "consistent")
                flags += ["--nli-labels", f"entailment={index}"]
        scores = {}
        for precision in ["fp32", "bf16", "int8"]:
            o = f"{out}/{name}-{precision}.parquet"
            subprocess.run(
                [binary, "score", inp, "-o", o, "--quiet", "--overwrite",
                 "--cross-model", str(ROOT / "tests/fixtures/models" / name),
                 "--precision", precision, *flags],
                check=True,
            )
            t = pq.read_table(o)
            scores[precision] = [v for c in columns for v in t.column(c).to_pylist()]
        parts = []
        for precision in ["bf16", "int8"]:
            d = sorted(
                abs(a - b)
                for a, b in zip(scores[precision], scores["fp32"])
                if a is not None and b is not None
            )
            parts.append(f"{precision} max {d[-1]:.1e} p99 {d[int(0.99 * (len(d) - 1))]:.1e}")
        print(f"{name}: {'; '.join(parts)} ({len(d)} values)")


if __name__ == "__main__":
    main()
