#!/usr/bin/env python3
"""Encoder speed per model family: refscore's forward against PyTorch's on
the same texts, the same number of threads, in one run.

For each family it builds a real-size checkpoint with random weights
(transformers' own class and the architecture's published sizes; weights do
not change speed) under OUT/<family>, as a sentence-transformers folder that
borrows the tokenizer and pooling of the family's tiny test model
(tests/fixtures/models), so token ids stay within the vocabulary. Then, on
TEXTS distinct texts drawn from the family parity fixture's corpus:

* PyTorch: texts sorted by length, batches of 32, tokenised before the
  clock, ``model(**tokens)`` under ``torch.inference_mode()``, THREADS
  threads; tokens/s over real tokens (padding not counted);
* refscore: ``refscore score --metrics embedding --threads THREADS`` on a
  Parquet whose references and outputs are those texts; its summary's
  ``embedding.tokens_per_second`` (tokens / forward seconds), once per
  ``--precisions`` entry (fp32 alone by default; each ratio is against
  torch's fp32 forward).

It prints one line per family and writes OUT/families.json. Run with the
parity environment (scripts/env/parity-requirements.txt) and a release
build:

    /work/venvs/parity/bin/python scripts/bench/families.py [--families deberta-v2 qwen3] \
        [--precisions fp32 bf16 int8]

Environment: REFSCORE_BIN (default $CARGO_TARGET_DIR/release/refscore).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "common"))
from refscore_scripts import REPO, load_script  # noqa: E402

TINY = os.path.join(REPO, "tests", "fixtures", "models")

# Published sizes (config.json of the named checkpoints); vocabularies kept
# whole, since the embedding matrix is part of the model's memory.
SIZES = {
    "bert": ("bert-base-uncased", "tiny-bert-unigram", dict(
        hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
        intermediate_size=3072, vocab_size=30522, max_position_embeddings=512)),
    "deberta-v2": ("deberta-v3-base", "tiny-deberta-v3", dict(
        hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
        intermediate_size=3072, vocab_size=128100, max_position_embeddings=512,
        relative_attention=True, position_buckets=256, share_att_key=True,
        pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm", position_biased_input=False,
        type_vocab_size=0, layer_norm_eps=1e-7)),
    "modernbert": ("modernbert-base", "tiny-modernbert", dict(
        hidden_size=768, num_hidden_layers=22, num_attention_heads=12,
        intermediate_size=1152, vocab_size=50368, max_position_embeddings=8192,
        local_attention=128, global_attn_every_n_layers=3)),
    "nomic_bert": ("nomic-embed-text-v1.5", "tiny-nomic-bert", dict(
        hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
        intermediate_size=3072, vocab_size=30528, max_position_embeddings=2048,
        type_vocab_size=2, hidden_act="silu")),
    "qwen3": ("Qwen3-Embedding-0.6B", "tiny-qwen3", dict(
        hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, intermediate_size=3072, vocab_size=151669,
        max_position_embeddings=32768, rope_parameters={"rope_type": "default",
                                                        "rope_theta": 1000000.0})),
    "gemma3_text": ("embeddinggemma-300m", "tiny-embeddinggemma", dict(
        hidden_size=768, num_hidden_layers=24, num_attention_heads=3,
        num_key_value_heads=1, head_dim=256, intermediate_size=1152, vocab_size=262144,
        max_position_embeddings=2048, sliding_window=512, query_pre_attn_scalar=256,
        use_bidirectional_attention=True)),
}


def build(family: str, out: str) -> str:
    """The real-size folder of `family` (made once)."""
    import torch
    from transformers import (BertConfig, BertModel, DebertaV2Config, DebertaV2Model,
                              Gemma3TextConfig, Gemma3TextModel, ModernBertConfig,
                              ModernBertModel, NomicBertConfig, NomicBertModel, Qwen3Config,
                              Qwen3Model)
    classes = {"bert": (BertConfig, BertModel), "deberta-v2": (DebertaV2Config, DebertaV2Model),
               "modernbert": (ModernBertConfig, ModernBertModel),
               "nomic_bert": (NomicBertConfig, NomicBertModel),
               "qwen3": (Qwen3Config, Qwen3Model),
               "gemma3_text": (Gemma3TextConfig, Gemma3TextModel)}
    _, tiny, sizes = SIZES[family]
    folder = os.path.join(out, family)
    if os.path.exists(os.path.join(folder, "model.safetensors")):
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(os.path.join(TINY, tiny), folder)
    config_class, model_class = classes[family]
    torch.manual_seed(1)
    model = model_class(config_class(**sizes)).eval()
    for name in os.listdir(folder):
        if name.endswith("_Dense"):
            shutil.rmtree(os.path.join(folder, name))
    # Transformer, Pooling, Normalize only (the tiny Dense sizes do not fit).
    with open(os.path.join(folder, "modules.json")) as f:
        modules = [m for m in json.load(f) if not m["type"].endswith("Dense")]
    with open(os.path.join(folder, "modules.json"), "w") as f:
        json.dump(modules, f, indent=2)
    model.save_pretrained(folder + ".hf", safe_serialization=True)
    for name in ("config.json", "model.safetensors"):
        shutil.move(os.path.join(folder + ".hf", name), os.path.join(folder, name))
    shutil.rmtree(folder + ".hf")
    return folder


def texts(count: int) -> list[str]:
    """`count` distinct texts from the parity fixture's rows, joined in
    twos and threes for longer ones."""
    fam = load_script(os.path.join(REPO, "scripts", "fixtures", "make-family-fixture.py"))
    base = sorted({t for _, r, o in fam.base_rows(lambda s: len(s.split())) for t in (r, o)
                   if t.strip()})
    out, k = [], 0
    while len(out) < count:
        joined = " ".join(base[(k + j) % len(base)] for j in range(1 + k % 3))
        if joined not in out:
            out.append(joined)
        k += 1
    return out


def torch_speed(folder: str, items: list[str], threads: int) -> dict:
    import torch
    from transformers import AutoModel, AutoTokenizer
    torch.set_num_threads(threads)
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder).eval()
    order = sorted(items, key=lambda t: len(tok(t)["input_ids"]))
    batches = [tok(order[k:k + 32], padding=True, truncation=True, max_length=512,
                   return_tensors="pt") for k in range(0, len(order), 32)]
    real = sum(int(b["attention_mask"].sum()) for b in batches)
    with torch.inference_mode():
        model(**{k: v[:2] for k, v in batches[0].items()})  # warm-up
        start = time.perf_counter()
        for b in batches:
            model(**b)
        seconds = time.perf_counter() - start
    return {"tokens": real, "seconds": seconds, "tokens_per_second": real / seconds}


def refscore_speed(binary: str, folder: str, items: list[str], threads: int, work: str,
                   precision: str) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq
    data = os.path.join(work, "texts.parquet")
    half = len(items) // 2
    pq.write_table(pa.table({"id": [str(k) for k in range(half)],
                             "reference": items[:half], "output": items[half:2 * half]}), data)
    result = os.path.join(work, "scores.parquet")
    subprocess.run([binary, "score", data, "-o", result, "--metrics", "embedding", "--model",
                    folder, "--threads", str(threads), "--quiet", "--max-seq-length", "512", "--overwrite",
                    "--precision", precision],
                   check=True)
    with open(result + ".summary.json") as f:
        e = json.load(f)["embedding"]
    return {"tokens": e["tokens"], "seconds": e["forward_seconds"],
            "tokens_per_second": e["tokens_per_second"], "kernels": e.get("kernels")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="/var/tmp/refscore-families")
    ap.add_argument("--texts", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--families", nargs="*", default=list(SIZES))
    ap.add_argument("--precisions", nargs="*", default=["fp32"],
                    choices=["fp32", "bf16", "int8"])
    args = ap.parse_args()
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target"))
    binary = os.environ.get("REFSCORE_BIN", os.path.join(target, "release", "refscore"))
    os.makedirs(args.out, exist_ok=True)
    items = texts(args.texts)
    rows = []
    for family in args.families:
        folder = build(family, args.out)
        torch_s = torch_speed(folder, items, args.threads)
        for precision in args.precisions:
            ours = refscore_speed(binary, folder, items, args.threads, args.out, precision)
            ratio = ours["tokens_per_second"] / torch_s["tokens_per_second"]
            rows.append({"family": family, "as": SIZES[family][0], "precision": precision,
                         "torch": torch_s, "refscore": ours, "ratio": ratio})
            print(f"{family:12s} ({SIZES[family][0]}) {precision}: refscore "
                  f"{ours['tokens_per_second']:8.0f} tok/s, torch fp32 "
                  f"{torch_s['tokens_per_second']:8.0f} tok/s, {ratio:.2f}x "
                  f"({ours['tokens']} / {torch_s['tokens']} tokens)", flush=True)
    with open(os.path.join(args.out, "families.json"), "w") as f:
        json.dump({"threads": args.threads, "texts": args.texts, "cpu": platform.processor(),
                   "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
