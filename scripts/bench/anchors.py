#!/usr/bin/env python3
"""The CPU anchors refscore's encoder is held against (scripts/bench/anchors.sh).

Each anchor computes what `refscore score --metrics cosine` computes for a row --
mean-pooled, normalised sentence embeddings of the reference and the output,
then their cosine, negative values counted as 0 -- with the fastest published CPU setups for the same model:

* ``pytorch``  the model's fp32 forward as sentence-transformers runs it;
* ``ort-int8`` ONNX Runtime on an ONNX export with dynamic int8 quantisation
  (per-channel s8 weights, activations quantised at run time), as
  sentence-transformers' "onnx qint8" export does;
* ``ov-fp32``  OpenVINO on the model converted to its IR, fp32 weights;
* ``ov-int8``  OpenVINO on a static int8 model made by NNCF (post-training
  quantisation, transformer preset), calibrated on locally generated
  sentences that are not the timed ones, as sentence-transformers'
  "openvino qint8" export does.

Usage:
  anchors.py make MODEL_DIR WORK CALIBRATION.parquet [--calibration-texts N]
      writes WORK/model.onnx, WORK/model-int8.onnx, WORK/ov-fp32/, WORK/ov-int8/
  anchors.py run ENGINE MODEL_DIR WORK IN.parquet OUT.parquet [--threads T] [--batch-size B]
      scores IN's rows (id, reference, output) with ENGINE, writes id + cosine to
      OUT and prints one JSON line: rows, distinct texts, tokens, the seconds of the
      work (tokenising, forward, pooling, cosine; model loading and imports are
      not counted, which favours the anchor) and rows per second
  anchors.py deviation A.parquet B.parquet LABEL
      prints the p99 and largest |cosine difference| of two results, row for row
"""

from __future__ import annotations

import json
import os
import sys
import time

ENGINES = ("pytorch", "ort-int8", "ov-fp32", "ov-int8")
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def log(msg: str) -> None:
    print(f"[anchors] {msg}", file=sys.stderr, flush=True)


def read_rows(path: str):
    import pyarrow.parquet as pq

    t = pq.read_table(path, columns=["id", "reference", "output"])
    return t.column("id").to_pylist(), t.column("reference").to_pylist(), t.column("output").to_pylist()


def max_length(model_dir: str) -> int:
    cfg = os.path.join(model_dir, "sentence_bert_config.json")
    if os.path.exists(cfg):
        return int(json.load(open(cfg)).get("max_seq_length", 256))
    return 256


def make(model_dir: str, work: str, calibration: str, n_texts: int) -> None:
    import nncf
    import numpy as np
    import openvino as ov
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel, AutoTokenizer

    os.makedirs(work, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    example = tok(["a first example sentence", "and a second, somewhat longer one"], padding=True,
                  return_tensors="pt")
    names = [k for k in INPUTS if k in example]
    log("ONNX export (opset 17, dynamic batch and length)")
    axes = {k: {0: "batch", 1: "tokens"} for k in names}
    axes["last_hidden_state"] = {0: "batch", 1: "tokens"}
    class Body(torch.nn.Module):
        """The encoder with its inputs by name, returning the last hidden states."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args):
            return self.inner(**dict(zip(names, args))).last_hidden_state

    torch.onnx.export(Body(model), tuple(example[k] for k in names), f"{work}/model.onnx", input_names=names,
                      output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=17,
                      dynamo=False)
    log("ONNX Runtime dynamic int8 (per-channel s8 weights)")
    quantize_dynamic(f"{work}/model.onnx", f"{work}/model-int8.onnx", weight_type=QuantType.QInt8,
                     per_channel=True, reduce_range=False)
    log("OpenVINO IR, fp32")
    ov_model = ov.convert_model(f"{work}/model.onnx")
    ov.save_model(ov_model, f"{work}/ov-fp32/model.xml", compress_to_fp16=False)
    # Calibration texts: the first N distinct texts of a set made with another seed
    # than the timed one, so no timed text was seen by the quantiser.
    _, refs, outs = read_rows(calibration)
    texts = list(dict.fromkeys(refs + outs))[:n_texts]
    m = max_length(model_dir)
    samples = []
    for start in range(0, len(texts), 8):
        enc = tok(texts[start:start + 8], padding=True, truncation=True, max_length=m, return_tensors="np")
        samples.append({k: enc[k].astype(np.int64) for k in names})
    log(f"NNCF static int8 (transformer preset), {len(texts)} calibration texts")
    quantized = nncf.quantize(ov_model, nncf.Dataset(samples), model_type=nncf.ModelType.TRANSFORMER,
                              subset_size=len(samples))
    ov.save_model(quantized, f"{work}/ov-int8/model.xml", compress_to_fp16=False)


class Encoder:
    """One engine's forward: token ids in, last hidden states out (numpy)."""

    def __init__(self, engine: str, model_dir: str, work: str, threads: int):
        self.engine = engine
        if engine == "pytorch":
            import torch
            from transformers import AutoModel

            torch.set_num_threads(threads)
            self.torch = torch
            self.model = AutoModel.from_pretrained(model_dir).eval()
        elif engine == "ort-int8":
            import onnxruntime as ort

            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads
            opts.inter_op_num_threads = 1
            self.session = ort.InferenceSession(f"{work}/model-int8.onnx", opts,
                                                providers=["CPUExecutionProvider"])
            self.names = [i.name for i in self.session.get_inputs()]
        else:
            import openvino as ov

            core = ov.Core()
            core.set_property("CPU", {"INFERENCE_NUM_THREADS": threads})
            folder = "ov-fp32" if engine == "ov-fp32" else "ov-int8"
            # fp32 means fp32: OpenVINO would otherwise run bf16 where the CPU has it.
            config = {"INFERENCE_PRECISION_HINT": "f32"} if engine == "ov-fp32" else {}
            config["PERFORMANCE_HINT"] = "LATENCY"
            self.compiled = core.compile_model(f"{work}/{folder}/model.xml", "CPU", config)
            self.names = [i.get_any_name() for i in self.compiled.inputs]

    def __call__(self, enc: dict):
        if self.engine == "pytorch":
            with self.torch.inference_mode():
                out = self.model(**{k: self.torch.from_numpy(v) for k, v in enc.items()})
            return out.last_hidden_state.numpy()
        feed = {k: enc[k] for k in self.names}
        if self.engine == "ort-int8":
            return self.session.run(None, feed)[0]
        return self.compiled(feed)[0]


def run(engine: str, model_dir: str, work: str, src: str, dst: str, threads: int, batch: int) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    ids, refs, outs = read_rows(src)
    tok = AutoTokenizer.from_pretrained(model_dir)
    enc_fn = Encoder(engine, model_dir, work, threads)
    m = max_length(model_dir)
    warm = tok(["warm up"], return_tensors="np")
    enc_fn({k: warm[k].astype(np.int64) for k in INPUTS if k in warm})
    t0 = time.perf_counter()
    texts = list(dict.fromkeys(refs + outs))
    index = {t: i for i, t in enumerate(texts)}
    pieces = tok(texts, truncation=True, max_length=m)["input_ids"]
    tokens = sum(len(p) for p in pieces)
    order = sorted(range(len(texts)), key=lambda i: -len(pieces[i]))
    vectors = np.zeros((len(texts), 0), dtype=np.float32)
    for start in range(0, len(order), batch):
        chunk = order[start:start + batch]
        enc = tok([texts[i] for i in chunk], padding=True, truncation=True, max_length=m, return_tensors="np")
        enc = {k: enc[k].astype(np.int64) for k in INPUTS if k in enc}
        hidden = np.asarray(enc_fn(enc), dtype=np.float32)
        mask = enc["attention_mask"][..., None].astype(np.float32)
        pooled = (hidden * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)
        pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        if vectors.shape[1] == 0:
            vectors = np.zeros((len(texts), pooled.shape[1]), dtype=np.float32)
        vectors[chunk] = pooled
    a = vectors[[index[r] for r in refs]]
    b = vectors[[index[o] for o in outs]]
    # Negative cosines count as 0, as refscore's do (docs/metrics.md).
    cosine = np.maximum((a * b).sum(1), 0.0)
    seconds = time.perf_counter() - t0
    pq.write_table(pa.table({"id": ids, "cosine": pa.array(cosine, pa.float32())}), dst)
    print(json.dumps({"engine": engine, "rows": len(ids), "texts": len(texts), "tokens": tokens,
                      "seconds": seconds, "rows_per_second": len(ids) / seconds, "threads": threads,
                      "batch_size": batch}))


def deviation(a: str, b: str, label: str) -> None:
    import numpy as np
    import pyarrow.parquet as pq

    ta, tb = pq.read_table(a), pq.read_table(b)
    if ta.column("id").to_pylist() != tb.column("id").to_pylist():
        sys.exit(f"deviation: {a} and {b} hold different rows")
    x = np.array(ta.column("cosine").to_pylist(), dtype=float)
    y = np.array(tb.column("cosine").to_pylist(), dtype=float)
    d = np.abs(x - y)
    print(json.dumps({"label": label, "rows": int(d.size), "p99": float(np.quantile(d, 0.99)),
                      "max": float(d.max())}))


def main(argv: list) -> int:
    args = argv[1:]
    opts = {}
    while len(args) >= 2 and args[-2].startswith("--"):
        opts[args[-2]] = args[-1]
        args = args[:-2]
    if args[:1] == ["make"] and len(args) == 4:
        make(args[1], args[2], args[3], int(opts.get("--calibration-texts", 300)))
    elif args[:1] == ["run"] and len(args) == 6 and args[1] in ENGINES:
        run(*args[1:], int(opts.get("--threads", 2)), int(opts.get("--batch-size", 32)))
    elif args[:1] == ["deviation"] and len(args) == 4:
        deviation(*args[1:])
    else:
        print(__doc__, file=sys.stderr)
        return 64
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
