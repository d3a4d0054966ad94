#!/usr/bin/env python3
"""Build the tiny sentence-transformers folders the family parity tests use
(tests/fixtures/models/), for families whose real weights are not on PyPI:

* ``tiny-roberta``: RoBERTa with a byte-level BPE tokenizer (GPT-2's
  pre-tokenizer, no prefix space, as roberta-base's tokenizer.json);
* ``tiny-xlm-roberta``: XLM-RoBERTa with a Unigram (SentencePiece-style)
  tokenizer: Metaspace pre-tokenizer, NFKC and XLM-R's run-of-spaces
  Replace normalizer;
* ``tiny-bert-unigram``: BERT with a Unigram tokenizer, as
  paraphrase-multilingual-MiniLM-L12-v2 pairs a BERT body with XLM-R's
  tokenizer; CLS pooling, to exercise another pooling mode.

Each is a real Hugging Face checkpoint (a few layers, hidden size 32) with
weights drawn by ``transformers``' own initialisation from a fixed seed, a
tokenizer trained with the ``tokenizers`` package on the parity fixture's
texts, and the sentence-transformers modules (Transformer, Pooling,
Normalize) saved by sentence-transformers itself. The weights are random:
parity with the reference libraries does not need a trained model.

Run with the parity environment (scripts/parity-requirements.txt):

    /work/venvs/parity/bin/python scripts/make-tiny-models.py
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "tests", "fixtures", "models")
SEED = 20261123
MAX_LEN = 512  # every fixture text fits whole, in any of the tokenizers


def corpus() -> list[str]:
    """The texts of the family parity fixture (make-family-fixture.py)."""
    spec = importlib.util.spec_from_file_location(
        "make_family_fixture", os.path.join(REPO, "scripts", "make-family-fixture.py"))
    fam = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fam)
    rows = fam.base_rows(lambda s: len(s.split()))
    return sorted({t for _, r, o in rows for t in (r, o)})


def main() -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from tokenizers import processors, trainers
    from sentence_transformers import SentenceTransformer
    from sentence_transformers import models as st_models
    from transformers import (BertConfig, BertModel, PreTrainedTokenizerFast, RobertaConfig,
                              RobertaModel, RobertaTokenizer, XLMRobertaConfig,
                              XLMRobertaModel, XLMRobertaTokenizer)

    texts = corpus()
    os.makedirs(OUT, exist_ok=True)

    def bpe() -> Tokenizer:
        tok = Tokenizer(models.BPE(unk_token=None))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
        tok.train_from_iterator(texts, trainers.BpeTrainer(
            vocab_size=1500, special_tokens=specials, show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        tok.post_processor = processors.RobertaProcessing(
            ("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")),
            trim_offsets=True, add_prefix_space=False)
        return tok

    def unigram(specials: list[str], first: str, last: str) -> Tokenizer:
        tok = Tokenizer(models.Unigram())
        tok.normalizer = normalizers.Sequence(
            [normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
        tok.train_from_iterator(texts, trainers.UnigramTrainer(
            vocab_size=1500, special_tokens=specials, unk_token=specials[3],
            show_progress=False))
        tok.post_processor = processors.TemplateProcessing(
            single=f"{first} $A {last}", pair=f"{first} $A {last} {last} $B {last}",
            special_tokens=[(first, tok.token_to_id(first)), (last, tok.token_to_id(last))])
        return tok

    def save(name: str, model, hf_tok, pooling: str) -> None:
        # transformers' init leaves biases at 0 and norms at 1: move every
        # parameter, so each one matters to the parity tests.
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        folder = os.path.join(OUT, name)
        raw = folder + ".hf"
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(raw, ignore_errors=True)
        model.save_pretrained(raw, safe_serialization=True)
        hf_tok.save_pretrained(raw)
        body = st_models.Transformer(raw, max_seq_length=MAX_LEN)
        pool = st_models.Pooling(body.get_word_embedding_dimension(), pooling_mode=pooling)
        st = SentenceTransformer(modules=[body, pool, st_models.Normalize()], device="cpu")
        st.save(folder)
        os.remove(os.path.join(folder, "README.md"))  # a generated model card
        shutil.rmtree(raw)
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs)
        print(f"[tiny-models] {folder}: {size / 1e6:.2f} MB", file=sys.stderr)

    small = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                 intermediate_size=64, max_position_embeddings=MAX_LEN + 2,
                 hidden_act="gelu", layer_norm_eps=1e-5, initializer_range=0.2)

    def roberta_like(name, tok, seed, model_class, config_class, tokenizer_class):
        """A RoBERTa-shaped model (one token type, positions after pad id 1)
        with `tok`, mean pooling."""
        torch.manual_seed(seed)
        config = config_class(vocab_size=tok.get_vocab_size(), type_vocab_size=1,
                              pad_token_id=1, bos_token_id=0, eos_token_id=2, **small)
        model = model_class(config, add_pooling_layer=False)
        path = os.path.join(OUT, f"{name}-tokenizer.json")
        tok.save(path)
        save(name, model.eval(), tokenizer_class(tokenizer_file=path, model_max_length=MAX_LEN),
             "mean")
        os.remove(path)

    # RoBERTa, byte-level BPE.
    roberta_like("tiny-roberta", bpe(), SEED, RobertaModel, RobertaConfig, RobertaTokenizer)
    # XLM-RoBERTa, Unigram.
    roberta_like("tiny-xlm-roberta",
                 unigram(["<s>", "<pad>", "</s>", "<unk>", "<mask>"], "<s>", "</s>"),
                 SEED + 1, XLMRobertaModel, XLMRobertaConfig, XLMRobertaTokenizer)

    # BERT body, Unigram tokenizer, CLS pooling.
    tok = unigram(["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"], "[CLS]", "[SEP]")
    torch.manual_seed(SEED + 2)
    bert_small = dict(small, max_position_embeddings=MAX_LEN, layer_norm_eps=1e-12)
    model = BertModel(BertConfig(vocab_size=tok.get_vocab_size(), type_vocab_size=2,
                                 pad_token_id=0, **bert_small), add_pooling_layer=False)
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=MAX_LEN,
                                     unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                     sep_token="[SEP]", mask_token="[MASK]")
    save("tiny-bert-unigram", model.eval(), hf_tok, "cls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
