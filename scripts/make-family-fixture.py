#!/usr/bin/env python3
"""Build a parity fixture for any sentence-transformers folder refscore runs
(tests/fixtures/parity-<name>.jsonl): reference values of cosine and
BERTScore from the Python reference implementations, for the rows of
scripts/make-parity-fixture.py plus multilingual rows (accents, CJK, Arabic,
Hebrew, Cyrillic, Devanagari, Thai, emoji, mixed scripts).

For every (reference, output) pair it records:

* ``cosine``: sentence-transformers ``SentenceTransformer(model)``'s
  ``encode(..., normalize_embeddings=True)``, dot product, clamped at 0.
* ``bertscore_{precision,recall,f1}`` (and ``_idf``): ``bert_score.score(...,
  model_type=<model path>, num_layers=LAYER, batch_size=1, idf=...)``: the
  token states of layer LAYER (0 = the embeddings).
* ``bertscore_*_rescaled``: the same with ``rescale_with_baseline=True`` and
  ``baseline_path`` set to the fixture's baseline file (--baseline), which
  is written in bert_score's own format (``LAYER,P,R,F`` rows).

bert_score encodes texts for RoBERTa and GPT-2 tokenizers with
``add_prefix_space=True``; transformers 5's tokenizers ignore that argument
silently, so the script restores it (the text gets its leading space), as
bert_score computes with transformers 4 and as its published baselines were
measured.

Every value is cross-checked against numpy arithmetic on the hidden states
of ``transformers.AutoModel`` (one unpadded forward per text), with special
tokens found by encoding an empty text, not by name; the script fails when
any difference exceeds --tolerance. The first line of the output is a header
object with the model, layer, versions and the rows' count.

Setup as for scripts/make-parity-fixture.py (a virtualenv from
scripts/parity-requirements.txt), then for example:

    scripts/fetch-model.sh --model all-mpnet-base-v2
    /work/venvs/parity/bin/python scripts/make-family-fixture.py \\
        --model models/all-mpnet-base-v2 --layer 9 \\
        --out tests/fixtures/parity-all-mpnet-base-v2.jsonl
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import math
import os
import sys
import time
from collections import Counter

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MULTILINGUAL = [
    ("Le chat dort sur le canapé.", "Le chat fait la sieste sur le sofa."),
    ("Der Zug hat zwanzig Minuten Verspätung.", "Der Zug kommt 20 Minuten später."),
    ("El médico recomendó descansar dos días.", "The doctor advised two days of rest."),
    ("東京は日本の首都です。", "日本の首都は東京です。"),
    ("我今天很忙，明天再说吧。", "I am busy today, let's talk tomorrow."),
    ("서울은 한국의 수도입니다.", "한국의 수도는 서울이다."),
    ("القاهرة هي عاصمة مصر.", "عاصمة مصر هي القاهرة."),
    ("الطقس جميل اليوم", "The weather is nice today"),
    ("שלום, מה שלומך?", "Hello, how are you?"),
    ("Москва — столица России.", "Столица России — Москва."),
    ("भारत की राजधानी नई दिल्ली है।", "New Delhi is the capital of India."),
    ("กรุงเทพฯ เป็นเมืองหลวงของประเทศไทย", "Bangkok is the capital of Thailand."),
    ("Ship it 🚀🚀 today!", "Deploy today 🚀"),
    ("The café in Zürich serves crème brûlée 🍮.", "Zürich café: crème brûlée"),
    ("Price: ¥1,200 (約10ドル)", "About ten dollars"),
    ("naïve coöperation façade", "naive cooperation facade"),
    ("mixed 日本語 and English テキスト", "mixed Japanese and English text"),
    ("Ελληνικά και English μαζί", "Greek and English together"),
]


def log(msg: str) -> None:
    print(f"[family-parity] {msg}", file=sys.stderr, flush=True)


def base_rows(count_tokens):
    """The rows of scripts/make-parity-fixture.py, then the multilingual ones."""
    spec = importlib.util.spec_from_file_location(
        "make_parity_fixture", os.path.join(REPO, "scripts", "make-parity-fixture.py"))
    base = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(base)
    rows = base.build_pairs(count_tokens)
    for k, (r, o) in enumerate(MULTILINGUAL):
        rows.append((f"multi-{k:03d}", r, o))
        rows.append((f"multi-{k + len(MULTILINGUAL):03d}", o, r))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--layer", type=int, required=True, help="bert_score's num_layers")
    ap.add_argument("--out", required=True)
    ap.add_argument("--baseline", help="write bert_score baselines here and check rescaling "
                    "(default: next to --out, .baseline.tsv)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tolerance", type=float, default=2e-5)
    args = ap.parse_args()

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    t_start = time.time()
    import numpy as np
    import torch
    import tokenizers
    import bert_score
    import bert_score.utils as bs_utils
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    torch.set_num_threads(args.threads)
    model_dir = os.path.abspath(args.model)
    versions = {"python": sys.version.split()[0]}
    for dist in ("torch", "transformers", "sentence-transformers", "bert-score",
                 "tokenizers", "numpy"):
        versions[dist] = importlib.metadata.version(dist)

    st = SentenceTransformer(model_dir, device="cpu")
    max_len = st.max_seq_length
    tk = tokenizers.Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tk.no_padding()
    tk.no_truncation()
    specials = set(tk.encode("").ids)

    # sentence-transformers 6 encodes texts as they are (no strip);
    # bert_score strips them.
    def ids_of(text: str) -> list[int]:
        return tk.encode(text).ids

    # bert_score's own encoding: a prefix space for byte-level BPE.
    from transformers import GPT2Tokenizer, RobertaTokenizer
    prefix_space = isinstance(st.tokenizer, (GPT2Tokenizer, RobertaTokenizer))

    def score_ids_of(text: str) -> list[int]:
        t = text.strip()
        return tk.encode(" " + t).ids if prefix_space and t else ids_of(t)

    rows = base_rows(lambda s: len(ids_of(s)))
    refs = [r[1] for r in rows]
    outs = [r[2] for r in rows]
    texts = sorted(set(refs) | set(outs))
    tok_ids = {t: ids_of(t) for t in texts}
    longest = max(len(v) for v in tok_ids.values())
    if longest > max_len:
        log(f"a text has {longest} tokens, over max_seq_length {max_len}")
        return 1
    log(f"{len(rows)} rows, {len(texts)} distinct texts, longest {longest} tokens, "
        f"special ids {sorted(specials)}")

    # sentence-transformers and bert_score tokenise like tokenizer.json.
    st_ids = st.tokenizer(texts, truncation=True, max_length=max_len)["input_ids"]
    for t, v in zip(texts, st_ids):
        assert list(v) == tok_ids[t], f"sentence-transformers tokenizer disagrees on {t!r}"

    emb = st.encode(texts, normalize_embeddings=True, batch_size=16,
                    convert_to_numpy=True, show_progress_bar=False)
    st_vec = {t: emb[i].astype(np.float64) for i, t in enumerate(texts)}
    cosine = [max(0.0, float(np.dot(st_vec[r], st_vec[o]))) for r, o in zip(refs, outs)]

    orig_sent_encode = bs_utils.sent_encode

    def sent_encode(tokenizer, sent):
        # As in make-parity-fixture.py: bert_score 0.3.13's empty-text path
        # calls a method transformers 5 removed.
        if sent.strip() == "":
            return tk.encode("").ids
        if prefix_space:
            # bert_score's add_prefix_space=True, which transformers 5 drops.
            return tokenizer.encode(" " + sent.strip(), add_special_tokens=True,
                                    max_length=tokenizer.model_max_length, truncation=True)
        return orig_sent_encode(tokenizer, sent)

    bs_utils.sent_encode = sent_encode

    # Hidden states of the layer, one unpadded forward per text.
    model = AutoModel.from_pretrained(model_dir).eval()
    layers = model.config.num_hidden_layers
    hidden, last = {}, {}
    score_ids = {t: score_ids_of(t) for t in texts}
    with torch.no_grad():
        def states(ids):
            ids = torch.tensor([ids], dtype=torch.long)
            return model(input_ids=ids, attention_mask=torch.ones_like(ids),
                         output_hidden_states=True).hidden_states
        for t in texts:
            last[t] = states(tok_ids[t])[layers][0].double().numpy()
            hidden[t] = states(score_ids[t])[args.layer][0].double().numpy()

    with open(os.path.join(model_dir, "1_Pooling", "config.json")) as f:
        pool = json.load(f)
    cls = pool.get("pooling_mode") == "cls" or pool.get("pooling_mode_cls_token", False)
    log(f"pooling: {'cls' if cls else 'mean'}")

    def pooled(t):
        v = last[t][0] if cls else last[t].mean(axis=0)
        return v / np.linalg.norm(v)

    pv = {t: pooled(t) for t in texts}
    cos_np = [max(0.0, float(np.dot(pv[r], pv[o]))) for r, o in zip(refs, outs)]
    unit = {t: h / np.linalg.norm(h, axis=1, keepdims=True) for t, h in hidden.items()}
    M = len(refs)
    df = Counter()
    for r in refs:
        df.update(set(score_ids[r]))
    idf_w = {w: math.log((M + 1) / (c + 1)) for w, c in df.items()}

    def formula(ref, out, use_idf):
        def w(t):
            v = np.array([idf_w.get(i, math.log(M + 1)) if use_idf else 1.0
                          for i in score_ids[t]])
            v[[k for k, i in enumerate(score_ids[t]) if i in specials]] = 0.0
            return v
        wc, wr = w(out), w(ref)
        if wc.sum() == 0 or wr.sum() == 0:
            return 0.0, 0.0, 0.0
        sim = unit[out] @ unit[ref].T
        p = float((wc * sim.max(axis=1)).sum() / wc.sum())
        r = float((wr * sim.max(axis=0)).sum() / wr.sum())
        return p, r, (2 * p * r / (p + r) if p + r != 0 else 0.0)

    # A baseline file in bert_score's format: the mean raw P, R, F of
    # mismatched pairs, for every layer (row N = num_layers N).
    baseline = args.baseline or os.path.splitext(args.out)[0] + ".baseline.tsv"
    lines = ["LAYER,P,R,F"]
    for n in range(layers + 1):
        b = 0.84 + 0.01 * n / max(layers, 1)
        lines.append(f"{n},{b:.6f},{b - 0.01:.6f},{b - 0.005:.6f}")
    with open(baseline, "w") as f:
        f.write("\n".join(lines) + "\n")

    def run_bert_score(idf, rescale=False):
        P, R, F = bert_score.score(
            cands=outs, refs=refs, model_type=model_dir, num_layers=args.layer,
            batch_size=1, idf=idf, device="cpu", nthreads=0, verbose=False,
            rescale_with_baseline=rescale, baseline_path=baseline if rescale else None,
            lang="en" if rescale else None)
        return [[float(x) for x in v] for v in (P, R, F)]

    bs = {"": run_bert_score(False), "_idf": run_bert_score(True),
          "_rescaled": run_bert_score(False, True)}
    want = {"": [formula(r, o, False) for r, o in zip(refs, outs)],
            "_idf": [formula(r, o, True) for r, o in zip(refs, outs)]}
    base_row = [float(x) for x in lines[args.layer + 1].split(",")[1:]]
    want["_rescaled"] = [tuple((v - b) / (1 - b) for v, b in zip(row, base_row))
                         for row in want[""]]
    worst = {"cosine": max(abs(a - b) for a, b in zip(cosine, cos_np))}
    for suffix, got in bs.items():
        worst["bertscore" + suffix] = max(abs(got[k][i] - want[suffix][i][k])
                                          for i in range(len(rows)) for k in range(3))
    log("max |reference - numpy|: " + ", ".join(f"{k} {v:.3g}" for k, v in worst.items()))
    if max(worst.values()) > args.tolerance:
        log(f"FAILED: over tolerance {args.tolerance}")
        return 1

    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        header = {"model": os.path.basename(model_dir), "layer": args.layer,
                  "bertscore_prefix_space": prefix_space,
                  "layers": layers, "max_seq_length": max_len, "rows": len(rows),
                  "baseline": os.path.basename(baseline), "versions": versions}
        f.write(json.dumps({"header": header}) + "\n")
        for i, (rid, r, o) in enumerate(rows):
            obj = {"id": rid, "reference": r, "output": o, "cosine": cosine[i]}
            for suffix, got in bs.items():
                for k, name in enumerate(("precision", "recall", "f1")):
                    obj[f"bertscore_{name}{suffix}"] = got[k][i]
            f.write(json.dumps(obj, ensure_ascii=True) + "\n")
    os.replace(tmp, args.out)
    log(f"wrote {len(rows)} rows to {args.out} in {time.time() - t_start:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
