#!/usr/bin/env python3
"""Real-size cross-encoders for the benchmarks, and what a user runs today:
the helpers of scripts/bench/cross.sh (CPU) and of scripts/bench/gpu.sh's step
`cross` (GPU). Needs torch, transformers, sentence-transformers, pyarrow.

  make minilm|deberta|modernbert TOKENIZER_DIR DST
                        a real-size NLI cross-encoder with seeded random weights,
                        made and saved by transformers' own classes (the work of
                        the real model; no hub there, and 0.7 GB would not fit
                        one transfer):
                          minilm   BertForSequenceClassification of
                                   all-MiniLM-L6-v2's shapes (those of
                                   cross-encoder/ms-marco-MiniLM-L6-v2), labels in
                                   cross-encoder/nli-*'s order, its own tokenizer
                          deberta  DebertaV2ForSequenceClassification of
                                   DeBERTa-v3-base's shapes (MoritzLaurer's and
                                   cross-encoder/nli-deberta-v3-base's body), labels
                                   entailment, neutral, contradiction; the tokenizer
                                   of tests/fixtures/models/tiny-cross-deberta-v3-nli
                                   with a 512-token limit (a smaller vocabulary than
                                   the real one: the same texts cut into more pieces;
                                   both engines read the same pieces)
                          modernbert ModernBertForSequenceClassification of
                                   ModernBERT-base's shapes (22 layers, local
                                   attention of 128 every layer but each third),
                                   cls pooling, the same labels, the tokenizer of
                                   tests/fixtures/models/tiny-cross-modernbert-nli
  head N IN OUT         the first N rows of a Parquet file
  predict MODEL IN OUT [--device D] [--batch-size B] [--dtype fp32|fp16|bf16]
                        what a user runs today: sentence-transformers'
                        CrossEncoder(MODEL).predict on (reference, output) and
                        (output, reference), apply_softmax=True, and refscore's
                        NLI metrics from the probabilities (docs/metrics.md):
                        OUT holds id, nli_precision, nli_recall, nli_equivalence,
                        nli_contradiction; one JSON line to stdout with rows,
                        seconds (loading and both predicts), pairs_per_second
"""

import json
import os
import shutil
import sys
import time


def make(kind: str, tokenizer_dir: str, dst: str) -> None:
    import torch
    from transformers import (BertConfig, BertForSequenceClassification, DebertaV2Config,
                              DebertaV2ForSequenceClassification, ModernBertConfig,
                              ModernBertForSequenceClassification)

    torch.manual_seed(0)
    os.makedirs(dst, exist_ok=True)
    if kind == "minilm":
        labels = ["contradiction", "entailment", "neutral"]
        config = BertConfig.from_pretrained(tokenizer_dir)
        config.architectures = ["BertForSequenceClassification"]
        config.num_labels = len(labels)
        model_class = BertForSequenceClassification
        files = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")
    elif kind == "modernbert":
        labels = ["entailment", "neutral", "contradiction"]
        tiny = json.load(open(os.path.join(tokenizer_dir, "config.json")))
        config = ModernBertConfig(
            vocab_size=50368, hidden_size=768, intermediate_size=1152, num_hidden_layers=22,
            num_attention_heads=12, global_attn_every_n_layers=3, local_attention=128,
            max_position_embeddings=8192, global_rope_theta=160000.0, local_rope_theta=10000.0,
            classifier_pooling="cls", architectures=["ModernBertForSequenceClassification"],
            num_labels=len(labels),
            **{k: tiny[k] for k in ("pad_token_id", "bos_token_id", "eos_token_id",
                                     "cls_token_id", "sep_token_id")})
        model_class = ModernBertForSequenceClassification
        files = ("tokenizer.json", "tokenizer_config.json")
    else:
        labels = ["entailment", "neutral", "contradiction"]
        config = DebertaV2Config(
            vocab_size=128100, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
            intermediate_size=3072, max_position_embeddings=512, type_vocab_size=0,
            relative_attention=True, position_buckets=256, max_relative_positions=-1,
            norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type=["p2c", "c2p"],
            position_biased_input=False, layer_norm_eps=1e-7, pad_token_id=0,
            pooler_hidden_size=768, pooler_dropout=0.0, pooler_hidden_act="gelu",
            architectures=["DebertaV2ForSequenceClassification"], num_labels=len(labels))
        model_class = DebertaV2ForSequenceClassification
        files = ("tokenizer.json", "tokenizer_config.json")
    config.id2label = dict(enumerate(labels))
    config.label2id = {name: i for i, name in enumerate(labels)}
    model_class(config).eval().save_pretrained(dst)
    for name in files:
        if os.path.exists(os.path.join(tokenizer_dir, name)):
            shutil.copy(os.path.join(tokenizer_dir, name), dst)
    tok_config = os.path.join(dst, "tokenizer_config.json")
    settings = json.load(open(tok_config))
    settings["model_max_length"] = 512
    json.dump(settings, open(tok_config, "w"))


def head(n: str, src: str, dst: str) -> None:
    import pyarrow.parquet as pq

    pq.write_table(pq.read_table(src).slice(0, int(n)), dst)


def predict(model_dir: str, src: str, dst: str, device: str, batch_size: int, dtype: str = "fp32") -> None:
    if device == "cpu" and os.environ.get("THREADS"):
        import torch

        torch.set_num_threads(int(os.environ["THREADS"]))
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from sentence_transformers import CrossEncoder

    table = pq.read_table(src)
    refs, outs = table.column("reference").to_pylist(), table.column("output").to_pylist()
    t0 = time.perf_counter()
    model = CrossEncoder(model_dir, device=device)
    if dtype != "fp32":
        import torch

        model.model.to({"fp16": torch.float16, "bf16": torch.bfloat16}[dtype])
    forward = model.predict(list(zip(refs, outs)), batch_size=batch_size, apply_softmax=True)
    backward = model.predict(list(zip(outs, refs)), batch_size=batch_size, apply_softmax=True)
    seconds = time.perf_counter() - t0
    label = {name.lower(): int(i) for i, name in model.config.id2label.items()}
    entail, contra = label["entailment"], label["contradiction"]
    forward, backward = np.asarray(forward, np.float32), np.asarray(backward, np.float32)
    precision, recall = forward[:, entail], backward[:, entail]
    pq.write_table(pa.table({
        "id": table.column("id"),
        "nli_precision": pa.array(precision, pa.float32()),
        "nli_recall": pa.array(recall, pa.float32()),
        "nli_equivalence": pa.array(np.minimum(precision, recall), pa.float32()),
        "nli_contradiction": pa.array(np.maximum(forward[:, contra], backward[:, contra]), pa.float32()),
    }), dst)
    print(json.dumps({"rows": table.num_rows, "seconds": seconds, "rows_per_second": table.num_rows / seconds,
                      "pairs_per_second": 2 * table.num_rows / seconds, "batch_size": batch_size,
                      "dtype": dtype}))


def main(argv: list) -> int:
    cmd, args = (argv[1], argv[2:]) if len(argv) > 1 else ("", [])
    if cmd == "make" and len(args) == 3 and args[0] in ("minilm", "deberta", "modernbert"):
        make(*args)
    elif cmd == "head" and len(args) == 3:
        head(*args)
    elif cmd == "predict" and len(args) >= 3:
        opts = dict(zip(args[3::2], args[4::2]))
        predict(*args[:3], opts.get("--device", "cuda"), int(opts.get("--batch-size", 32)),
                opts.get("--dtype", "fp32"))
    else:
        print(__doc__, file=sys.stderr)
        return 64
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
