#!/usr/bin/env python3
"""Helpers of scripts/bench/gpu.sh, standard library plus what the GPU
machine has (numpy, pyarrow):

  weights SRC DST f16|q8|f32
                            rewrite a safetensors file's float tensors in another
                            form: f16; q8 (a matrix's rows as int8 with one f32
                            scale per row, vectors as f16: the model travels so to
                            fit one transfer); f32 (widens either back). Every
                            engine on the GPU machine reads the same widened copy,
                            so comparisons there are like for like
  skeleton SRC DST          a safetensors file's header and its integer tensors
                            only (a few KiB): the shapes of a model too big to carry
  fill SKELETON DST         a model of the skeleton's shapes with seeded random
                            weights (normal, sd 0.02; norms' weights 1, biases 0):
                            the same work as the real model, for speed and parity
  monitor OUT.json -- CMD   runs CMD while sampling the GPU (NVML, every 50 ms):
                            wall seconds, mean and busy share of GPU utilisation,
                            peak device memory used above the start
  fixture JSONL OUT         a parity fixture's (id, reference, output) as Parquet
                            (a header line without them is skipped)
  compare A B TOL [CASE]    max |A - B| per metric column (every float column) of
                            two results, one JSON line (named CASE); exit 1 when
                            any exceeds TOL or a row holds a value in one only
  record refscore|cross|python|encoder SOURCE MONITOR ENGINE MODEL SET
                            the result records of one timed run (a refscore
                            summary, of embeddings or of a cross-encoder;
                            python.py's or cross.py's JSON line; python.py's
                            encoder-only lines), with MONITOR's GPU figures ('-'
                            for none)
  table RESULTS.json        prints the benchmark table of gpu.sh
"""

import json
import struct
import sys


SCALE = "::row_scale"  # q8: the f32 scales of the int8 matrix of the same name


def read_safetensors(path: str):
    """(header without metadata, metadata, {name: numpy array})."""
    import numpy as np

    kinds = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32, "I8": np.int8}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", None)
    arrays = {}
    for name, info in header.items():
        start, end = info["data_offsets"]
        arrays[name] = np.frombuffer(data[start:end], dtype=kinds[info["dtype"]]).reshape(info["shape"])
    return header, meta, arrays


def write_safetensors(path: str, arrays: dict, meta=None) -> None:
    import numpy as np

    names = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int64): "I64",
             np.dtype(np.int32): "I32", np.dtype(np.int8): "I8"}
    header, chunks, offset = {}, [], 0
    if meta is not None:
        header["__metadata__"] = meta
    for name, a in arrays.items():
        raw = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": names[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)


def weights(src: str, dst: str, form: str) -> None:
    import numpy as np

    _, meta, arrays = read_safetensors(src)
    out = {}
    for name, a in arrays.items():
        if name.endswith(SCALE):
            continue
        if a.dtype == np.int8 and name + SCALE in arrays:
            a = a.astype(np.float32) * arrays[name + SCALE][:, None]
        if a.dtype not in (np.float32, np.float16):
            out[name] = a
        elif form == "f32":
            out[name] = a.astype(np.float32)
        elif form == "f16" or a.ndim != 2:
            out[name] = a.astype(np.float16)
        else:  # q8: symmetric, one scale per row
            a = a.astype(np.float32)
            scale = np.abs(a).max(axis=1) / 127.0
            scale[scale == 0] = 1.0
            out[name] = np.clip(np.rint(a / scale[:, None]), -127, 127).astype(np.int8)
            out[name + SCALE] = scale.astype(np.float32)
    write_safetensors(dst, out, meta)


def skeleton(src: str, dst: str) -> None:
    import numpy as np

    header, meta, arrays = read_safetensors(src)
    kept = {n: a for n, a in arrays.items() if a.dtype.kind == "i"}
    shapes = {n: {"dtype": i["dtype"], "shape": i["shape"]} for n, i in header.items()}
    meta = dict(meta or {}, skeleton=json.dumps(shapes))
    write_safetensors(dst, kept, meta)


def fill(src: str, dst: str) -> None:
    import numpy as np

    _, meta, arrays = read_safetensors(src)
    shapes = json.loads(meta.pop("skeleton"))
    rng = np.random.default_rng(0)
    out = {}
    for name, info in shapes.items():
        if name in arrays:
            out[name] = arrays[name]
        elif name.endswith("bias"):
            out[name] = np.zeros(info["shape"], np.float32)
        elif len(info["shape"]) == 1:
            out[name] = np.ones(info["shape"], np.float32)
        else:
            out[name] = (rng.standard_normal(info["shape"], np.float32) * 0.02).astype(np.float32)
    write_safetensors(dst, out, meta or None)


def monitor(out: str, cmd: list) -> int:
    """Runs cmd, sampling NVML; writes its figures to out; returns cmd's exit code."""
    import subprocess
    import threading
    import time

    samples, stop = [], threading.Event()
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        base = pynvml.nvmlDeviceGetMemoryInfo(handle).used

        def sample() -> None:
            while not stop.is_set():
                u = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
                m = pynvml.nvmlDeviceGetMemoryInfo(handle).used
                samples.append((u, m))
                time.sleep(0.05)
    except Exception as e:  # no GPU, no NVML: wall time only
        print(f"monitor: no NVML ({e}); wall time only", file=sys.stderr)
        base, sample = 0, None
    thread = threading.Thread(target=sample, daemon=True) if sample else None
    t0 = time.perf_counter()
    if thread:
        thread.start()
    code = subprocess.call(cmd)
    seconds = time.perf_counter() - t0
    stop.set()
    if thread:
        thread.join()
    result = {"seconds": seconds, "exit": code, "samples": len(samples)}
    if samples:
        util = [u for u, _ in samples]
        result.update(gpu_util_mean=sum(util) / len(util),
                      gpu_busy_share=sum(u > 0 for u in util) / len(util),
                      gpu_mem_peak_mib=max(0, max(m for _, m in samples) - base) / 2**20)
    json.dump(result, open(out, "w"))
    return code


def fixture(jsonl: str, out: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in open(jsonl, encoding="utf-8") if line.strip()]
    rows = [r for r in rows if "id" in r]
    pq.write_table(pa.table({k: [r[k] for r in rows] for k in ("id", "reference", "output")}), out)


def compare(a: str, b: str, tol: str, case: str = "") -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    ta, tb = pq.read_table(a), pq.read_table(b)
    if ta.column("id").to_pylist() != tb.column("id").to_pylist():
        print(f"compare: {a} and {b} hold different rows", file=sys.stderr)
        return 1
    worst, mismatched = {}, 0
    for field in ta.schema:
        if not pa.types.is_floating(field.type) or field.name not in tb.column_names:
            continue
        xs, ys = ta.column(field.name).to_pylist(), tb.column(field.name).to_pylist()
        mismatched += sum((x is None) != (y is None) for x, y in zip(xs, ys))
        worst[field.name] = max((abs(x - y) for x, y in zip(xs, ys) if x is not None and y is not None),
                                default=0.0)
    ok = bool(worst) and mismatched == 0 and all(v <= float(tol) for v in worst.values())
    print(json.dumps({"case": case, "rows": ta.num_rows, "max_abs_diff": worst,
                      "null_mismatches": mismatched, "tolerance": float(tol), "ok": ok}))
    return 0 if ok else 1


def deviation(a: str, b: str, case: str) -> int:
    """Prints the p99 and largest |a - b| of every float column both files hold (a reduced
    precision's result against fp32's, row for row): the figures docs/performance.md states."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    ta, tb = pq.read_table(a), pq.read_table(b)
    if ta.column("id").to_pylist() != tb.column("id").to_pylist():
        print(f"deviation: {a} and {b} hold different rows", file=sys.stderr)
        return 1
    p99, worst = {}, {}
    for field in ta.schema:
        if not pa.types.is_floating(field.type) or field.name not in tb.column_names:
            continue
        xs = np.array([np.nan if v is None else v for v in ta.column(field.name).to_pylist()], dtype=float)
        ys = np.array([np.nan if v is None else v for v in tb.column(field.name).to_pylist()], dtype=float)
        d = np.abs(xs - ys)
        d = d[~np.isnan(d)]
        if d.size:
            p99[field.name] = float(np.quantile(d, 0.99))
            worst[field.name] = float(d.max())
    print(json.dumps({"kind": "deviation", "case": case, "rows": ta.num_rows, "p99_abs_diff": p99,
                      "max_abs_diff_all": worst}))
    return 0


def record(kind: str, source: str, monitor_path: str, engine: str, model: str, set_name: str) -> None:
    """Prints one JSON line per result of a timed run, for gpu.sh's results file."""
    gpu = {}
    if monitor_path != "-":
        m = json.load(open(monitor_path))
        gpu = {k: v for k, v in m.items() if k.startswith("gpu_")}
        gpu["wall_seconds"] = m["seconds"]
    base = {"kind": "run", "engine": engine, "model": model, "set": set_name}
    if kind == "refscore":
        s = json.load(open(source))
        e = s["embedding"]
        keep = ("tokens", "padded_tokens", "texts_embedded", "tokenize_seconds", "forward_seconds",
                "forward_launch_seconds", "forward_wait_seconds", "tokens_per_second")
        print(json.dumps({**base, "rows": s["rows"], "seconds": s["seconds"],
                          "rows_per_second": s["rows_per_second"], "peak_rss_bytes": s.get("peak_rss_bytes"),
                          **{k: e.get(k) for k in keep}, **gpu}))
    elif kind == "cross":
        s = json.load(open(source))
        c = s["cross"]
        keep = ("pairs_scored", "tokens", "forward_seconds", "pairs_per_second")
        print(json.dumps({**base, "rows": s["rows"], "seconds": s["seconds"],
                          "rows_per_second": s["rows_per_second"], "peak_rss_bytes": s.get("peak_rss_bytes"),
                          "tokens_per_second": c["tokens"] / max(c["forward_seconds"], 1e-9),
                          **{k: c.get(k) for k in keep}, **gpu}))
    elif kind == "python":
        a = json.load(open(source))
        keep = ("rows", "seconds", "rows_per_second", "st_seconds", "bertscore_seconds", "peak_rss_bytes",
                "pairs_per_second")
        print(json.dumps({**base, **{k: a.get(k) for k in keep}, **gpu}))
    else:  # encoder: python.py --encoder-only, one line per type and batch size
        for line in open(source):
            e = json.loads(line)
            keep = ("tokens_per_second", "tokens", "padded_tokens", "seconds")
            print(json.dumps({**base, "engine": f"PyTorch encoder {e['dtype']}, batch {e['batch_size']}",
                              **{k: e[k] for k in keep}, **gpu}))


def table(path: str) -> None:
    """Prints the parity cases and the timed runs of a results JSONL file."""
    records = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    for r in records:
        if r.get("kind") == "gpu":
            print(f"GPU: {r['gpu']}; {r.get('cuda', '')}")
    parity = [r for r in records if "max_abs_diff" in r or r.get("kind") == "parity"]
    if parity:
        print(f"parity, GPU against the same binary's CPU fp32 (max |diff| over every metric column):")
        for r in parity:
            worst = max(r.get("max_abs_diff", {}).values(), default=float("nan"))
            state = "ok" if r.get("ok") else "FAILED " + r.get("error", "")
            print(f"  {r.get('case', '?'):<44} {r.get('rows', 0):>5} rows  {worst:.2e}  {state}")
    devs = [r for r in records if r.get("kind") == "deviation"]
    if devs:
        print("deviation from fp32 (p99 / max |diff|; cosine, BERTScore F1, the largest column):")
        for r in devs:
            p99, mx = r.get("p99_abs_diff", {}), r.get("max_abs_diff_all", {})
            cols = [c for c in ("cosine", "bertscore_f1") if c in mx] or sorted(mx, key=mx.get)[-1:]
            text = "  ".join(f"{c} {p99[c]:.1e}/{mx[c]:.1e}" for c in cols)
            big = max(mx, key=mx.get) if mx else None
            print(f"  {r.get('case', '?'):<44} {r.get('rows', 0):>6} rows  {text}"
                  + (f"  (largest: {big} {mx[big]:.1e})" if big and big not in cols else ""))
    runs = [r for r in records if r.get("kind") == "run"]
    if runs:
        print(f"{'engine':<40} {'model':<7} {'set':<13} {'rows/s':>9} {'tokens/s':>10} "
              f"{'GPU util':>8} {'busy':>5} {'GPU MiB':>8} {'pad':>5} {'fwd s':>6} {'wait s':>6}")
        for r in runs:
            def num(key, fmt):
                v = r.get(key)
                return format(v, fmt) if isinstance(v, (int, float)) else "-"
            # Padded tokens per real one: the work padding adds.
            pad = (format(r["padded_tokens"] / r["tokens"], ".2f")
                   if r.get("padded_tokens") and r.get("tokens") else "-")
            print(f"{r.get('engine', '?'):<40} {r.get('model', ''):<7} {r.get('set', ''):<13} "
                  f"{num('rows_per_second', '.0f'):>9} {num('tokens_per_second', '.0f'):>10} "
                  f"{num('gpu_util_mean', '.0f'):>8} {num('gpu_busy_share', '.2f'):>5} "
                  f"{num('gpu_mem_peak_mib', '.0f'):>8} {pad:>5} {num('forward_seconds', '.2f'):>6} "
                  f"{num('forward_wait_seconds', '.2f'):>6}")
    for r in records:
        if r.get("kind") == "note":
            print(f"note: {r['text']}")


def main(argv: list) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 64
    cmd, args = argv[1], argv[2:]
    if cmd == "weights" and len(args) == 3 and args[2] in ("f16", "q8", "f32"):
        weights(*args)
    elif cmd == "skeleton" and len(args) == 2:
        skeleton(*args)
    elif cmd == "fill" and len(args) == 2:
        fill(*args)
    elif cmd == "monitor" and len(args) >= 3 and args[1] == "--":
        return monitor(args[0], args[2:])
    elif cmd == "fixture" and len(args) == 2:
        fixture(*args)
    elif cmd == "compare" and len(args) in (3, 4):
        return compare(*args)
    elif cmd == "deviation" and len(args) == 3:
        return deviation(*args)
    elif cmd == "record" and len(args) == 6 and args[0] in ("refscore", "cross", "python", "encoder"):
        record(*args)
    elif cmd == "table" and len(args) == 1:
        table(*args)
    else:
        print(__doc__, file=sys.stderr)
        return 64
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
