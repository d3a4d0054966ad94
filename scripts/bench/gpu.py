#!/usr/bin/env python3
"""Helpers of scripts/bench/gpu.sh, standard library plus what the GPU
machine has (numpy, pyarrow):

  weights SRC DST f16|f32   rewrite a safetensors file's float tensors in another
                            width (the model travels as f16 to fit one transfer;
                            every engine on the GPU machine reads the same widened
                            copy, so comparisons there are like for like)
  fixture JSONL OUT         the parity fixture's (id, reference, output) as Parquet
  compare A B TOL           max |A - B| per embedding metric column of two results;
                            exit 1 when any exceeds TOL
  table RESULTS.json        prints the benchmark table of gpu.sh
"""

import json
import struct
import sys


def weights(src: str, dst: str, width: str) -> None:
    import numpy as np

    target = {"f16": ("F16", np.float16), "f32": ("F32", np.float32)}[width]
    with open(src, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out_header, chunks, offset = {}, [], 0
    for name, info in header.items():
        if name == "__metadata__":
            out_header[name] = info
            continue
        start, end = info["data_offsets"]
        raw = data[start:end]
        if info["dtype"] in ("F32", "F16"):
            source = np.float32 if info["dtype"] == "F32" else np.float16
            raw = np.frombuffer(raw, dtype=source).astype(target[1]).tobytes()
            info = dict(info, dtype=target[0])
        out_header[name] = dict(info, data_offsets=[offset, offset + len(raw)])
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(out_header).encode()
    text += b" " * (-len(text) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)


def fixture(jsonl: str, out: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in open(jsonl, encoding="utf-8") if line.strip()]
    pq.write_table(pa.table({k: [r[k] for r in rows] for k in ("id", "reference", "output")}), out)


METRICS = ("cosine", "bertscore_precision", "bertscore_recall", "bertscore_f1")


def compare(a: str, b: str, tol: str) -> int:
    import pyarrow.parquet as pq

    ta, tb = pq.read_table(a), pq.read_table(b)
    if ta.column("id").to_pylist() != tb.column("id").to_pylist():
        print(f"compare: {a} and {b} hold different rows", file=sys.stderr)
        return 1
    worst = {}
    for m in METRICS:
        pairs = zip(ta.column(m).to_pylist(), tb.column(m).to_pylist())
        worst[m] = max((abs(x - y) for x, y in pairs if x is not None and y is not None), default=0.0)
    print(json.dumps({"max_abs_diff": worst, "tolerance": float(tol)}))
    return 0 if all(v <= float(tol) for v in worst.values()) else 1


def table(path: str) -> None:
    r = json.load(open(path, encoding="utf-8"))
    print(f"GPU: {r.get('gpu', '?')}; rows per set: {r.get('rows', '?')}")
    p = r.get("parity")
    if p:
        print(f"parity GPU vs CPU fp32 (max |diff|, tolerance {p['tolerance']}): "
              + ", ".join(f"{k} {v:.2e}" for k, v in p["max_abs_diff"].items()))
    print(f"{'engine':<34} {'set':<9} {'rows/s':>10} {'encoder tokens/s':>17}")
    for row in r.get("runs", []):
        rps = f"{row['rows_per_second']:.0f}" if row.get("rows_per_second") else "-"
        tps = f"{row['tokens_per_second']:.0f}" if row.get("tokens_per_second") else "-"
        print(f"{row['engine']:<34} {row['set']:<9} {rps:>10} {tps:>17}")
    for note in r.get("notes", []):
        print(f"note: {note}")


def main(argv: list) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 64
    cmd, args = argv[1], argv[2:]
    if cmd == "weights" and len(args) == 3:
        weights(*args)
    elif cmd == "fixture" and len(args) == 2:
        fixture(*args)
    elif cmd == "compare" and len(args) == 3:
        return compare(*args)
    elif cmd == "table" and len(args) == 1:
        table(*args)
    else:
        print(__doc__, file=sys.stderr)
        return 64
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
