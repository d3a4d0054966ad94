"""Generated result pairs for the `refscore report` tests: a baseline run and
tonight's run over the same ids, with a known regression injected into one
slice ("math") and nothing but symmetric noise elsewhere.

The files have the shape `refscore score --keep category,question,reference,output`
writes: id, metric columns (Float32), status, error, then the kept columns.
"""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SLICES = ["geo", "math", "code", "chat"]
REGRESSED = "math"
DROP = 0.15  # token_f1 loss injected into the regressed slice


def make_pair(directory, n=20_000, seed=1, shuffle_baseline=False):
    """Writes base.parquet and cur.parquet into `directory`; returns their paths."""
    rng = np.random.default_rng(seed)
    ids = np.arange(n, dtype=np.int64) * 7 + 3
    cat = np.array(SLICES)[rng.integers(0, len(SLICES), n)]
    f1_base = rng.random(n).astype(np.float32)
    noise = rng.normal(0.0, 0.05, n)
    f1_cur = np.clip(f1_base + noise - np.where(cat == REGRESSED, DROP, 0.0), 0, 1).astype(np.float32)
    em_base = (f1_base > 0.8).astype(np.float32)
    em_cur = (f1_cur > 0.8).astype(np.float32)
    # Some rows cannot be scored (null metrics, status=error), in each run.
    err_base = rng.random(n) < 0.01
    err_cur = rng.random(n) < 0.015
    reasons = np.array(["reference is null", "reference is empty", "output is null"])

    def write(path, f1, em, err, order):
        f1 = pa.array(f1, pa.float32(), mask=err)
        em = pa.array(em, pa.float32(), mask=err)
        status = np.where(err, "error", "ok")
        error = pa.array(np.where(err, reasons[ids % 3], None).tolist(), pa.string())
        table = pa.table(
            {
                "id": ids,
                "exact_match": em,
                "token_f1": f1,
                "status": status,
                "error": error,
                "category": cat,
                "question": [f"question {i}?" for i in ids],
                "reference": [f"reference answer {i}" for i in ids],
                "output": [f"output {i} " + ("x" * (i % 5)) for i in ids],
            }
        ).take(order)
        pq.write_table(table, path, row_group_size=5000)

    base = directory / "base.parquet"
    cur = directory / "cur.parquet"
    order = rng.permutation(n) if shuffle_baseline else np.arange(n)
    write(base, f1_base, em_base, err_base, order)
    write(cur, f1_cur, em_cur, err_cur, np.arange(n))
    return base, cur
