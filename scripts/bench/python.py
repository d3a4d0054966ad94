#!/usr/bin/env python3
"""The Python anchor for refscore's embedding benchmark: what a user would
otherwise run to get the same scores (docs/metrics.md#embedding-metrics) with the reference libraries.

Default mode, on an input Parquet with columns id, reference, output:

(a) sentence-transformers: ``SentenceTransformer(model_dir, device=DEVICE)``
    (``--device``, default cpu),
    ``.encode(refs)`` and ``.encode(outs)`` (default batch size 32,
    ``normalize_embeddings=True``), cosine = max(0, dot product);
(b) bert_score: ``bert_score.score(outs, refs, model_type=model_dir,
    num_layers=<the model's last layer>, batch_size=64, idf=False)`` with its
    default batching.

Each phase is timed with ``time.perf_counter`` (model loading included, as a
user pays it; Python imports are not). One JSON line goes to stdout:
{"rows", "seconds", "rows_per_second", "st_seconds", "bertscore_seconds",
"tokens", "peak_rss_bytes", ...}, where ``seconds`` = reading the input + (a) +
(b), ``tokens`` = word-pieces including [CLS]/[SEP] over every text
sentence-transformers encoded (refs + outs, repeats included, truncated at its
max_seq_length), counted after the timed part, and ``peak_rss_bytes`` =
``ru_maxrss * 1024``. The per-row scores are written to OUTPUT (Parquet: id,
cosine, bertscore_precision, bertscore_recall, bertscore_f1) so they can be
compared with refscore's.

``--encoder-only`` times just the encoder forward pass of the
sentence-transformers model over every distinct text of the input (refs and
outs): texts sorted by word-piece length, batches of 32, tokenised before the
clock starts, ``model(**tokens)`` under ``torch.inference_mode()``. It prints
{"texts", "tokens", "seconds", "tokens_per_second", ...} (tokens = real
word-pieces incl. [CLS]/[SEP], padding not counted): the PyTorch encoder
tokens/s figure to set beside refscore's ``embedding.tokens_per_second``.
``--dtype fp32,bf16`` and ``--encoder-batch-size 32,256`` time each type and
batch size in turn (the model cast to that type, as a GPU user would), one JSON
line each.

Usage:
    python scripts/bench/python.py INPUT.parquet OUTPUT.parquet [--threads 2]
    python scripts/bench/python.py INPUT.parquet --encoder-only [--threads 2]

Environment: the pinned packages of scripts/env/parity-requirements.txt plus pyarrow
(scripts/bench/vs-python.sh makes such a virtualenv). The model folder defaults
to $REFSCORE_MODEL_DIR, else models/all-MiniLM-L6-v2 (scripts/fetch-model.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "common"))
from refscore_scripts import DEFAULT_MODEL, logger, patch_bert_score_empty_text  # noqa: E402

log = logger("bench_python")


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def read_input(path: str):
    import pyarrow.parquet as pq
    table = pq.read_table(path, columns=["id", "reference", "output"])
    ids = table.column("id")
    # Nulls: the benchmark sets have none; score a null as an empty text.
    refs = ["" if s is None else s for s in table.column("reference").to_pylist()]
    outs = ["" if s is None else s for s in table.column("output").to_pylist()]
    return ids, refs, outs


def run_scores(args, model_dir: str) -> dict:
    t_import = time.perf_counter()
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch
    import bert_score
    from sentence_transformers import SentenceTransformer
    torch.set_num_threads(args.threads)
    patch_bert_score_empty_text()
    import_seconds = time.perf_counter() - t_import

    t0 = time.perf_counter()
    ids, refs, outs = read_input(args.input)
    read_seconds = time.perf_counter() - t0
    rows = len(refs)
    log(f"{rows} rows from {args.input} ({read_seconds:.2f}s), {args.threads} torch threads")

    # (a) sentence-transformers cosine
    t0 = time.perf_counter()
    st = SentenceTransformer(model_dir, device=args.device)
    st_load_seconds = time.perf_counter() - t0
    ref_emb = st.encode(refs, batch_size=args.st_batch_size, normalize_embeddings=True,
                        convert_to_numpy=True, show_progress_bar=False)
    out_emb = st.encode(outs, batch_size=args.st_batch_size, normalize_embeddings=True,
                        convert_to_numpy=True, show_progress_bar=False)
    cosine = np.maximum(0.0, np.einsum("ij,ij->i", ref_emb.astype(np.float64),
                                       out_emb.astype(np.float64)))
    st_seconds = time.perf_counter() - t0
    log(f"sentence-transformers: {st_seconds:.2f}s (model load {st_load_seconds:.2f}s)")

    # (b) bert_score with its default batching. NOTE: this is what users run, but
    # bert_score pads each batch of pairs and lets the padded positions count as
    # similarity 0 inside the max, so some batched scores are inflated a little
    # (up to ~0.07 F1 on realistic data) and depend on batch composition; refscore
    # computes the clean formula (docs/metrics.md#embedding-metrics), so part of the score differences are
    # bert_score's, not refscore's.
    t0 = time.perf_counter()
    # The last layer, as refscore's default --layer (6 for MiniLM).
    with open(os.path.join(model_dir, "config.json")) as f:
        num_layers = json.load(f)["num_hidden_layers"]
    P, R, F = bert_score.score(outs, refs, model_type=model_dir, num_layers=num_layers,
                               batch_size=args.bs_batch_size, idf=False, device=args.device,
                               verbose=False)
    bertscore_seconds = time.perf_counter() - t0
    log(f"bert_score: {bertscore_seconds:.2f}s")

    seconds = read_seconds + st_seconds + bertscore_seconds

    # Not timed: word-pieces over everything sentence-transformers encoded.
    enc = st.tokenizer(refs + outs, truncation=True, max_length=st.max_seq_length)["input_ids"]
    tokens = int(sum(len(x) for x in enc))

    table = pa.table({
        "id": ids,
        "cosine": pa.array(cosine, pa.float32()),
        "bertscore_precision": pa.array(P.numpy(), pa.float32()),
        "bertscore_recall": pa.array(R.numpy(), pa.float32()),
        "bertscore_f1": pa.array(F.numpy(), pa.float32()),
    })
    tmp = args.output + ".tmp"
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, args.output)

    return {
        "rows": rows,
        "seconds": seconds,
        "rows_per_second": rows / seconds if seconds > 0 else None,
        "st_seconds": st_seconds,
        "bertscore_seconds": bertscore_seconds,
        "tokens": tokens,
        "peak_rss_bytes": peak_rss_bytes(),
        "read_seconds": read_seconds,
        "st_load_seconds": st_load_seconds,
        "import_seconds": import_seconds,
        "threads": args.threads,
        "device": args.device,
        "st_batch_size": args.st_batch_size,
        "bertscore_batch_size": args.bs_batch_size,
        "output": args.output,
    }


def run_encoder_only(args, model_dir: str) -> list:
    import torch
    from sentence_transformers import SentenceTransformer
    torch.set_num_threads(args.threads)

    _, refs, outs = read_input(args.input)
    texts = list(dict.fromkeys(refs + outs))  # distinct, first-seen order
    st = SentenceTransformer(model_dir, device=args.device)
    tok = st.tokenizer
    max_len = st.max_seq_length
    model = st[0].auto_model.eval()
    types = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    lengths = [len(x) for x in tok(texts, truncation=True, max_length=max_len)["input_ids"]]
    order = sorted(range(len(texts)), key=lambda i: (-lengths[i], i))
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    # Tokenised once per batch size, before any clock starts.
    prepared = {}
    for bs in args.encoder_batch_size:
        batches = []
        for start in range(0, len(order), bs):
            chunk = [texts[i] for i in order[start:start + bs]]
            batches.append(tok(chunk, padding=True, truncation=True, max_length=max_len,
                               return_tensors="pt"))
        tokens = int(sum(int(b["attention_mask"].sum()) for b in batches))
        padded = int(sum(b["input_ids"].numel() for b in batches))
        prepared[bs] = ([{k: v.to(args.device) for k, v in b.items()} for b in batches], tokens, padded)
    results = []
    # fp32 first: the model is cast down once per reduced type, never back up.
    for dtype in args.dtype:
        model = model.to(types[dtype])
        for bs in args.encoder_batch_size:
            batches, tokens, padded = prepared[bs]
            log(f"encoder-only {dtype}: {len(texts)} distinct texts, {tokens} word-pieces "
                f"({padded} with padding), {len(batches)} batches of <= {bs}, {args.threads} threads")
            with torch.inference_mode():
                if args.device.startswith("cuda"):
                    model(**batches[0])  # warm-up: CUDA context and kernels, not timed
                    sync()
                t0 = time.perf_counter()
                for b in batches:
                    model(**b)
                sync()
                seconds = time.perf_counter() - t0
            results.append({
                "texts": len(texts),
                "tokens": tokens,
                "seconds": seconds,
                "tokens_per_second": tokens / seconds if seconds > 0 else None,
                "padded_tokens": padded,
                "batch_size": bs,
                "dtype": dtype,
                "threads": args.threads,
                "peak_rss_bytes": peak_rss_bytes(),
            })
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input", help="Parquet file with id, reference, output")
    ap.add_argument("output", nargs="?", help="Parquet file for the per-row scores")
    ap.add_argument("--model", default=os.environ.get("REFSCORE_MODEL_DIR", DEFAULT_MODEL),
                    help="sentence-transformers model folder (default: $REFSCORE_MODEL_DIR, "
                         "else models/all-MiniLM-L6-v2)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    ap.add_argument("--device", default="cpu",
                    help="torch device for both libraries (default cpu; cuda on a GPU machine)")
    ap.add_argument("--st-batch-size", type=int, default=32,
                    help="SentenceTransformer.encode batch size (default 32, its default)")
    ap.add_argument("--bs-batch-size", type=int, default=64,
                    help="bert_score.score batch size (default 64, its default)")
    ap.add_argument("--encoder-only", action="store_true",
                    help="only time the encoder forward over the distinct texts")
    ap.add_argument("--encoder-batch-size", type=lambda v: [int(x) for x in v.split(",")],
                    default=[32], help="batch sizes for --encoder-only, comma-separated (default 32)")
    ap.add_argument("--dtype", type=lambda v: v.split(","), default=["fp32"],
                    help="the encoder's types for --encoder-only, comma-separated, from fp32, "
                         "bf16, fp16 (default fp32; fp32 first)")
    args = ap.parse_args()
    if not args.encoder_only and not args.output:
        ap.error("OUTPUT is required unless --encoder-only is given")
    if args.threads < 1:
        ap.error("--threads must be at least 1")

    # Before torch / tokenizers are imported: keep every thread pool at --threads
    # (torch intra-op via OMP/MKL, the Rust tokenizers via rayon) and stay offline.
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

    model_dir = os.path.abspath(args.model)
    if not os.path.isfile(os.path.join(model_dir, "model.safetensors")):
        log(f"no model at {model_dir}: run scripts/fetch-model.sh first")
        return 1

    if args.encoder_only:
        if any(d not in ("fp32", "bf16", "fp16") for d in args.dtype):
            ap.error("--dtype takes fp32, bf16 and fp16")
        for result in run_encoder_only(args, model_dir):
            print(json.dumps(result), flush=True)
    else:
        print(json.dumps(run_scores(args, model_dir)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
