"""Generates a scoring input and a second night's input over the same ids for
`scripts/bench-report.sh`: short QA answers in 20 categories, written in
1M-row row groups so memory stays small at 10M rows. Tonight's outputs differ
from last night's on about 10% of rows (one category much more often).

usage: make_report_bench.py ROWS OUT_DIR
"""

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

WORDS = np.array("paris london rome madrid the a capital of france is city river seine "
                 "answer one two three hundred year born died king queen war peace".split())
CATEGORIES = np.array([f"topic_{k:02d}" for k in range(20)])


def phrase(rng, n, lo, hi):
    lengths = rng.integers(lo, hi, n)
    words = WORDS[rng.integers(0, len(WORDS), (n, hi))]
    return [" ".join(w[:k]) for w, k in zip(words, lengths)]


def main():
    rows, out = int(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(42)
    chunk = 1_000_000
    schema = pa.schema([("id", pa.int64()), ("category", pa.string()), ("question", pa.string()),
                        ("reference", pa.string()), ("output", pa.string())])
    writers = {night: pq.ParquetWriter(out / f"{night}.parquet", schema, compression="zstd")
               for night in ("base", "cur")}
    for start in range(0, rows, chunk):
        n = min(chunk, rows - start)
        ids = np.arange(start, start + n, dtype=np.int64)
        cat = CATEGORIES[rng.integers(0, len(CATEGORIES), n)]
        question = phrase(rng, n, 3, 9)
        reference = phrase(rng, n, 1, 5)
        noisy = phrase(rng, n, 1, 6)
        base_out = [r if keep else x for r, x, keep in zip(reference, noisy, rng.random(n) < 0.6)]
        change = rng.random(n) < np.where(cat == "topic_07", 0.5, 0.1)
        cur_out = [x if c else b for b, x, c in zip(base_out, phrase(rng, n, 1, 6), change)]
        for night, outputs in (("base", base_out), ("cur", cur_out)):
            writers[night].write_table(pa.table(
                {"id": ids, "category": cat, "question": question, "reference": reference, "output": outputs},
                schema=schema))
    for w in writers.values():
        w.close()


if __name__ == "__main__":
    main()
