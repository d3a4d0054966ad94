#!/usr/bin/env python3
"""A FactCG-shaped checker at real size, for scripts/bench/checker.sh: the
model and the rows it scores, the authors' own FactCG code on them, and the
table that compares refscore with it. Needs torch, transformers, nltk,
pytorch_lightning (FactCG's package imports it) and pyarrow
(~/.cache/refscore/venv-anchors has them).

  make MODEL_DIR        DebertaV2ForSequenceClassification at DeBERTa-v3-large's
                        shapes (FactCG-DeBERTa-v3-Large's body: 24 layers, hidden
                        1024, 16 heads, feed-forward 4096, vocabulary 128,100,
                        relative attention only: 256 log buckets over 512
                        positions, shared keys, p2c|c2p, a layer-normed relative
                        table, no absolute positions, no token types; 2 labels),
                        drawn by transformers' own initialisation from a fixed
                        seed and nothing else (a head redrawn wide, as the tiny
                        twins have, put every score at 0.97 to 1.0, where a
                        softmax hides differences; at this init the scores sit
                        nearer 0.5, where it shows them most); saved with the
                        tokenizer of
                        tests/fixtures/models/tiny-cross-checker-deberta (the
                        Unigram/Metaspace tokenizer of tiny-deberta-v3, 1,500
                        pieces, with DeBERTa-v3's special tokens: no real
                        DeBERTa-v3 tokenizer is reachable here, so texts are cut
                        into about 2.1 pieces a word, against about 1.3 for the
                        real one; both engines read the same pieces)
  rows N WORDS OUT      N rows (id, reference, output) as Parquet: each
                        reference about WORDS words of English sentences, each
                        spliced from the front half of one sentence and the back
                        half of another of make-parity-fixture.py's LONG_TOPICS
                        (a fixed seed), in paragraphs of five; each output one
                        short claim, in turn a sentence from the reference's
                        last third (support only deep inside it), a spliced
                        sentence absent from it, and an answer of
                        examples/qa.parquet
  authors MODEL_DIR IN OUT --factcg-git G [--threads T] [--batch-size B]
                        the authors' code: FactCGScore(model_name="microsoft/
                        deberta-v3-large", batch_size=B (16, their README's),
                        verbose=False, use_hf_ckpt=True).score(contexts, claims)
                        on all rows in one call, on the CPU with torch on T
                        threads, extracted and redirected to MODEL_DIR exactly
                        as make-recipe-parity-fixture.py does (its functions);
                        OUT holds id and factcg; one JSON line to stdout with
                        load_s (FactCGScore(...)), score_s (.score) and chunks
  report RUNS TSV_OUT MD_OUT TOL
                        the table: RUNS is checker.sh's runs.tsv (engine, rep,
                        wall seconds, peak RSS KiB, output file); medians per
                        engine, ratios to the authors' run, each refscore
                        precision's largest difference from the authors' scores.
                        Exit 1 when fp32's exceeds TOL
"""

from __future__ import annotations

import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "common"))
from refscore_scripts import REPO, cpu_model, load_script, logger, reference_env  # noqa: E402

TOKENIZER = os.path.join(REPO, "tests", "fixtures", "models", "tiny-cross-checker-deberta")
RECIPE_FIXTURE = os.path.join(REPO, "scripts", "fixtures", "make-recipe-parity-fixture.py")
PARITY_FIXTURE = os.path.join(REPO, "scripts", "fixtures", "make-parity-fixture.py")
FACTCG_HUB_ID = "yaxili96/FactCG-DeBERTa-v3-Large"
SEED = 20261128

log = logger("checker")


def make(dst: str) -> None:
    import torch
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

    torch.manual_seed(SEED)
    config = DebertaV2Config(
        vocab_size=128100, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
        intermediate_size=4096, hidden_act="gelu", max_position_embeddings=512, type_vocab_size=0,
        relative_attention=True, position_buckets=256, max_relative_positions=-1,
        norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type=["p2c", "c2p"],
        position_biased_input=False, layer_norm_eps=1e-7, pad_token_id=0,
        pooler_hidden_size=1024, pooler_dropout=0.0, pooler_hidden_act="gelu",
        architectures=["DebertaV2ForSequenceClassification"], num_labels=2)
    model = DebertaV2ForSequenceClassification(config).eval()
    tmp = dst + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZER, name), tmp)
    shutil.rmtree(dst, ignore_errors=True)
    os.replace(tmp, dst)
    n = sum(p.numel() for p in model.parameters())
    log(f"{dst}: {n / 1e6:.0f}M parameters")


def rows(n: int, words: int, dst: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sents = [s for topic in load_script(PARITY_FIXTURE).LONG_TOPICS.values() for s in topic]
    halves = []
    for s in sents:
        w = s.rstrip(".").split()
        cut = len(w) // 2
        halves.append((w[:cut], w[cut:]))
    answers = [a for a in pq.read_table(os.path.join(REPO, "examples", "qa.parquet"))
               .column("output").to_pylist() if a and a.strip()]
    rng = random.Random(SEED)

    def spliced() -> str:
        front, back = halves[rng.randrange(len(halves))][0], halves[rng.randrange(len(halves))][1]
        return " ".join(front + back) + "."

    ids, refs, outs = [], [], []
    for i in range(n):
        body, count = [], 0
        while count < words:
            s = spliced()
            body.append(s)
            count += len(s.split())
        paras = [" ".join(body[j:j + 5]) for j in range(0, len(body), 5)]
        kind = i % 3
        if kind == 0:
            claim = body[rng.randrange(2 * len(body) // 3, len(body))]
        elif kind == 1:
            claim = spliced()
            while claim in body:
                claim = spliced()
        else:
            claim = answers[rng.randrange(len(answers))]
        ids.append(f"row-{i:04d}")
        refs.append("\n\n".join(paras))
        outs.append(claim)
    pq.write_table(pa.table({"id": ids, "reference": refs, "output": outs}), dst)
    log(f"{dst}: {n} rows, references of {statistics.mean(len(r.split()) for r in refs):.0f} words")


def authors(model_dir: str, src: str, dst: str, factcg_git: str, threads: int, batch_size: int) -> None:
    reference_env(threads)
    import torch
    torch.set_num_threads(threads)
    import pyarrow as pa
    import pyarrow.parquet as pq

    # The parity fixture's own extraction, NLTK data and redirection, pointed
    # at this folder: its `redirect` reads the module's MODELS and HUB.
    fx = load_script(RECIPE_FIXTURE)
    model_dir = os.path.abspath(model_dir)
    fx.MODELS = os.path.dirname(model_dir)
    fx.HUB = {FACTCG_HUB_ID: os.path.basename(model_dir)}
    table = pq.read_table(src)
    refs, outs = table.column("reference").to_pylist(), table.column("output").to_pylist()
    tmp = tempfile.mkdtemp(prefix="refscore-checker-")
    cwd = os.getcwd()
    try:
        commit = fx.extract(factcg_git, "factcg", tmp)
        fx.nltk_data(os.path.join(tmp, "nltk_data"))
        os.environ["NLTK_DATA"] = os.path.join(tmp, "nltk_data")
        sys.path.insert(0, tmp)
        os.chdir(tmp)  # FactCG passes cache_dir="./cache"
        import factcg.inference
        from factcg import FactCGScore

        fx.redirect(factcg.inference)
        t0 = time.perf_counter()
        scorer = FactCGScore(model_name="microsoft/deberta-v3-large", batch_size=batch_size,
                             verbose=False, use_hf_ckpt=True)
        t1 = time.perf_counter()
        scores = scorer.score(contexts=refs, claims=outs)
        t2 = time.perf_counter()
        chunks = sum(len(scorer.model.chunking_src(r)) for r in refs)
    finally:
        os.chdir(cwd)
        shutil.rmtree(tmp, ignore_errors=True)
    pq.write_table(pa.table({"id": table.column("id"), "factcg": pa.array(scores, pa.float64())}), dst)
    print(json.dumps({"rows": table.num_rows, "chunks": chunks, "load_s": t1 - t0, "score_s": t2 - t1,
                      "threads": threads, "batch_size": batch_size, "factcg_commit": commit,
                      "torch": torch.__version__}))


def report(runs_path: str, tsv_out: str, md_out: str, tol: float) -> int:
    import pyarrow.parquet as pq

    runs: dict[str, list[dict]] = {}
    with open(runs_path) as f:
        for line in f:
            engine, rep, wall, rss_kib, path = line.rstrip("\n").split("\t")
            runs.setdefault(engine, []).append(
                {"rep": int(rep), "wall": float(wall), "rss": int(rss_kib) / 1024, "path": path})
    if "authors" not in runs:
        raise SystemExit("no run of the authors' code in " + runs_path)

    def scores(engine: str, path: str) -> dict:
        t = pq.read_table(path)
        col = "factcg" if engine == "authors" else "cross_score"
        return dict(zip(t.column("id").to_pylist(), t.column(col).to_pylist()))

    theirs = scores("authors", runs["authors"][0]["path"])
    # The authors' own spread between their runs (padding is the same each
    # time, so this should be 0), a floor for every comparison below.
    theirs_spread = max((abs(a - theirs[k]) for r in runs["authors"][1:]
                         for k, a in scores("authors", r["path"]).items()), default=0.0)
    a_json = [json.load(open(r["path"] + ".json")) for r in runs["authors"]]
    a_wall = statistics.median(r["wall"] for r in runs["authors"])
    a_call = statistics.median(j["load_s"] + j["score_s"] for j in a_json)
    n_rows, chunks = a_json[0]["rows"], a_json[0]["chunks"]
    lines = []
    header = ["engine", "runs", "wall s (median)", "each run", "s/row", "s/chunk",
              "authors' wall / this", "authors' load+score / this", "max abs diff vs authors",
              "peak RSS MiB", "chunks"]
    tsv = ["\t".join(header)]
    status = 0
    for engine, rs in runs.items():
        wall = statistics.median(r["wall"] for r in rs)
        each = ", ".join(f"{r['wall']:.1f}" for r in rs)
        rss = max(r["rss"] for r in rs)
        if engine == "authors":
            diff, n_chunks = theirs_spread, chunks
        else:
            diff = 0.0
            for r in rs:
                ours = scores(engine, r["path"])
                if set(ours) != set(theirs):
                    raise SystemExit(f"{engine}: other ids than the authors' run")
                diff = max(diff, max(abs(ours[k] - theirs[k]) for k in theirs))
            summary = json.load(open(rs[0]["path"] + ".summary.json"))
            n_chunks = summary["cross"]["chunks_scored"]
            if engine == "fp32" and diff > tol:
                status = 1
        row = [engine, str(len(rs)), f"{wall:.1f}", each, f"{wall / n_rows:.2f}", f"{wall / n_chunks:.2f}",
               f"{a_wall / wall:.2f}x", f"{a_call / wall:.2f}x", f"{diff:.1e}", f"{rss:.0f}", str(n_chunks)]
        tsv.append("\t".join(row))
        lines.append("| " + " | ".join(row) + " |")
    md = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)] + lines
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    field = {k.strip(): v.strip() for k, _, v in (l.partition(":") for l in lscpu.splitlines())}
    intro = (f"{n_rows} rows, {chunks} FactCG chunks (the authors' chunking_src); {cpu_model()}, "
             f"family {field.get('CPU family', '?')} model {field.get('Model', '?')}, "
             f"{os.cpu_count()} CPUs; fp32 tolerance {tol:g}")
    notes = [
        f"- authors: whole process (imports, extracting their package, load, score, writing) in "
        f"'wall'; FactCGScore(...) + .score alone, median {a_call:.1f} s (load "
        f"{statistics.median(j['load_s'] for j in a_json):.1f}, score "
        f"{statistics.median(j['score_s'] for j in a_json):.1f}); torch {a_json[0]['torch']}, "
        f"{a_json[0]['threads']} threads, batch_size {a_json[0]['batch_size']}, FactCG "
        f"{a_json[0]['factcg_commit'][:7]}",
        "- max abs diff: each refscore run's cross_score against the authors' first run, largest "
        "over rows and runs; on the authors' row, the largest difference between their own runs",
    ]
    with open(tsv_out, "w") as f:
        f.write("\n".join(tsv) + "\n")
    with open(md_out, "w") as f:
        f.write(intro + "\n\n" + "\n".join(md + [""] + notes) + "\n")
    print(intro)
    print("\n".join(md + [""] + notes))
    if status:
        print(f"fp32 differs from the authors' scores by more than {tol:g}", file=sys.stderr)
    return status


def main(argv: list) -> int:
    cmd, args = (argv[1], argv[2:]) if len(argv) > 1 else ("", [])
    if cmd == "make" and len(args) == 1:
        make(args[0])
    elif cmd == "rows" and len(args) == 3:
        rows(int(args[0]), int(args[1]), args[2])
    elif cmd == "authors" and len(args) >= 5:
        opts = dict(zip(args[3::2], args[4::2]))
        authors(*args[:3], opts["--factcg-git"], int(opts.get("--threads", 2)),
                int(opts.get("--batch-size", 16)))
    elif cmd == "report" and len(args) == 4:
        return report(*args[:3], float(args[3]))
    else:
        print(__doc__, file=sys.stderr)
        return 64
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
