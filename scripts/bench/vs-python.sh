#!/usr/bin/env bash
# Benchmark refscore's embedding metrics against the Python stack a user would
# otherwise run (sentence-transformers for cosine, bert_score for BERTScore), in
# one run on one machine, on the same inputs and the same number of threads.
#
#   1. makes a virtualenv OUTSIDE the repository if it is missing (torch,
#      transformers, sentence-transformers, bert_score pinned by
#      scripts/env/parity-requirements.txt, plus pyarrow);
#   2. fetches the model (scripts/fetch-model.sh);
#   3. generates nightly.parquet (ROWS/20 references x 20 outputs) and
#      distinct.parquet (no repeated text) with scripts/fixtures/make-bench-sets.py;
#   4. uses the refscore binary (builds it with `cargo build --release` only when
#      the default path is missing);
#   5. for each set runs refscore (--metrics embedding) and then the Python
#      anchor (scripts/bench/python.py) on the same file;
#   6. compares the scores row by row, then times a second night of the nightly
#      set with --embed-cache (references stored by the first);
#   7. times the bare PyTorch encoder forward over the nightly set's distinct
#      texts (scripts/bench/python.py --encoder-only);
#   8. prints a table and writes everything to $OUT/bench-results.json.
#
# Usage:
#   scripts/bench/vs-python.sh
#   ROWS=200 scripts/bench/vs-python.sh           # a quick smoke run
#
# Environment:
#   ROWS                 rows per set (default 20000)
#   OUT                  work/output folder (default /tmp/refscore-bench)
#   THREADS              threads for refscore (--threads) and torch (default 2)
#   PRECISIONS           reduced precisions also run for refscore, after its fp32
#                        run, on the same sets (default "bf16 int8"; "" for none)
#   REFSCORE_BIN         refscore binary (default target/release/refscore, or
#                        $CARGO_TARGET_DIR/release/refscore)
#   REFSCORE_BENCH_VENV  virtualenv (default ~/.cache/refscore/venv-bench)
#   REFSCORE_MODEL_DIR   model folder (default models/all-MiniLM-L6-v2)
#   PYTHON               interpreter that creates the venv (default python3.11,
#                        else python3; also used by fetch-model.sh)
#   COSINE_TOL           max allowed |refscore - sentence-transformers| cosine
#                        difference (default 1e-4, docs/metrics.md); exceeding it makes
#                        the script exit 1 after printing the results.
#
# Exit status: 0 when everything ran and cosine agreed within COSINE_TOL.
# BERTScore differences are reported, not enforced: bert_score's default
# batching pads each batch of pairs and lets the padding count as similarity 0
# inside the max, which inflates some of its scores (docs/metrics.md#embedding-metrics).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
caller_pwd="$PWD"

rows="${ROWS:-20000}"
out="${OUT:-/tmp/refscore-bench}"
threads="${THREADS:-2}"
precisions="${PRECISIONS-bf16 int8}"
export BENCH_PRECISIONS_LIST="$precisions"
bin="${REFSCORE_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/refscore}"
venv="${REFSCORE_BENCH_VENV:-$HOME/.cache/refscore/venv-bench}"
model="${REFSCORE_MODEL_DIR:-$root/models/all-MiniLM-L6-v2}"
cosine_tol="${COSINE_TOL:-1e-4}"
if [[ -z "${PYTHON:-}" ]]; then
    if command -v python3.11 >/dev/null 2>&1; then PYTHON=python3.11; else PYTHON=python3; fi
fi
export PYTHON

step() { printf '\n== %s\n' "$*" >&2; }
die() { printf 'bench-vs-python: error: %s\n' "$*" >&2; exit 1; }

[[ "$rows" =~ ^[0-9]+$ && "$rows" -ge 1 ]] || die "ROWS must be a positive integer (got '$rows')"
[[ "$threads" =~ ^[0-9]+$ && "$threads" -ge 1 ]] || die "THREADS must be a positive integer (got '$threads')"
# Relative paths given by the caller are relative to where the script was started.
case "$venv" in /*) ;; *) venv="$caller_pwd/$venv" ;; esac
case "$model" in /*) ;; *) model="$caller_pwd/$model" ;; esac
case "$out" in /*) ;; *) out="$caller_pwd/$out" ;; esac
case "$bin" in /*) ;; *) bin="$caller_pwd/$bin" ;; esac
cd "$root"
case "$venv/" in "$root"/*) die "the virtualenv must live outside the repository (REFSCORE_BENCH_VENV=$venv)" ;; esac

# --- 1. virtualenv ---------------------------------------------------------------
step "python environment ($venv)"
py="$venv/bin/python"
if [[ ! -x "$py" ]]; then
    command -v "$PYTHON" >/dev/null 2>&1 || die "'$PYTHON' not found (set PYTHON=/path/to/python3.11)"
    mkdir -p "$(dirname "$venv")"
    "$PYTHON" -m venv "$venv"
    "$py" -m pip install --quiet --disable-pip-version-check -r scripts/env/parity-requirements.txt pyarrow
elif ! "$py" -c 'import torch, transformers, sentence_transformers, bert_score, tokenizers, pyarrow' 2>/dev/null; then
    "$py" -m pip install --quiet --disable-pip-version-check -r scripts/env/parity-requirements.txt pyarrow
fi
"$py" -c 'import torch, transformers, sentence_transformers, bert_score, tokenizers, pyarrow' \
    || die "the virtualenv at $venv lacks packages; remove it and run again"

# --- 2. model --------------------------------------------------------------------
step "model ($model)"
# The models fetch-model.sh knows are fetched by name; any other folder must
# be there already (never overwrite a folder with the default model).
case "$(basename "$model")" in
    all-MiniLM-L6-v2 | all-mpnet-base-v2) scripts/fetch-model.sh --model "$(basename "$model")" "$model" ;;
    *) [[ -f "$model/model.safetensors" ]] || die "no model at $model" ;;
esac

# --- 3. inputs -------------------------------------------------------------------
step "benchmark sets ($rows rows each) in $out"
mkdir -p "$out"
REFSCORE_MODEL_DIR="$model" "$py" scripts/fixtures/make-bench-sets.py "$out" --rows "$rows"

# --- 4. refscore binary ----------------------------------------------------------
step "refscore binary ($bin)"
if [[ ! -x "$bin" ]]; then
    if [[ -n "${REFSCORE_BIN:-}" ]]; then
        die "REFSCORE_BIN=$bin is not an executable file"
    fi
    cargo build --release --locked
fi
[[ -x "$bin" ]] || die "no refscore binary at $bin"
"$bin" --version >&2 || true

# --- 5./6. refscore, then Python, on each set; compare --------------------------
for set in nightly distinct; do
    input="$out/$set.parquet"
    step "$set: refscore score --metrics embedding --threads $threads"
    "$bin" score "$input" -o "$out/$set.refscore.parquet" --overwrite --quiet \
        --metrics embedding --threads "$threads" --model "$model"
    [[ -f "$out/$set.refscore.parquet.summary.json" ]] || die "refscore wrote no summary for $set"
    "$py" - "$out/$set.refscore.parquet.summary.json" <<'EOF' >&2
import json, sys
d = json.load(open(sys.argv[1]))
e = d.get("embedding") or {}
print(f"refscore: {d['rows']} rows in {d['seconds']:.2f}s ({d['rows_per_second']:.1f} rows/s), "
      f"{e.get('texts_embedded')} texts embedded at {e.get('tokens_per_second', 0):.0f} tok/s, "
      f"peak RSS {d['peak_rss_bytes'] / 2**20:.0f} MiB")
EOF

    for precision in $precisions; do
        step "$set: refscore score --precision $precision"
        "$bin" score "$input" -o "$out/$set.refscore.$precision.parquet" --overwrite --quiet \
            --metrics embedding --threads "$threads" --model "$model" --precision "$precision"
    done

    step "$set: Python anchor (sentence-transformers + bert_score, $threads torch threads)"
    "$py" scripts/bench/python.py "$input" "$out/$set.python.parquet" \
        --threads "$threads" --model "$model" >"$out/$set.python.json"
    cat "$out/$set.python.json" >&2

    step "$set: score comparison"
    "$py" - "$out" "$set" <<'EOF'
import json, sys
import numpy as np
import pyarrow.parquet as pq

out, name = sys.argv[1], sys.argv[2]
rs = pq.read_table(f"{out}/{name}.refscore.parquet",
                   columns=["id", "cosine", "bertscore_precision", "bertscore_recall",
                            "bertscore_f1", "status"]).to_pydict()
pyt = pq.read_table(f"{out}/{name}.python.parquet").to_pydict()
index = {i: k for k, i in enumerate(pyt["id"])}
assert len(index) == len(pyt["id"]), "duplicate ids in the Python output"

def aligned(col):
    a, b = [], []
    for k, i in enumerate(rs["id"]):
        x = rs[col][k]
        if x is None or i not in index:
            continue
        a.append(x)
        b.append(pyt[col][index[i]])
    return np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)

res = {"rows_refscore": len(rs["id"]), "rows_python": len(pyt["id"]),
       "rows_not_ok": sum(1 for s in rs["status"] if s != "ok")}
for col, key in (("cosine", "cosine"), ("bertscore_precision", "p"),
                 ("bertscore_recall", "r"), ("bertscore_f1", "f1")):
    a, b = aligned(col)
    d = np.abs(a - b)
    res[f"compared_{key}"] = int(len(d))
    res[f"max_abs_diff_{key}"] = float(d.max()) if len(d) else None
    res[f"mean_abs_diff_{key}"] = float(d.mean()) if len(d) else None
    res[f"share_abs_diff_{key}_gt_1e-4"] = float((d > 1e-4).mean()) if len(d) else None
    if key == "f1" and len(d):
        big = d > 1e-4
        # bert_score's padding inflation only ever raises its scores.
        res["share_f1_diffs_where_bert_score_higher"] = (
            float((b[big] > a[big]).mean()) if big.any() else None)
json.dump(res, open(f"{out}/{name}.compare.json", "w"), indent=2)

def f(x, spec=".2e"):
    return "n/a" if x is None else format(x, spec)
print(f"{name}: {res['compared_cosine']} rows compared ({res['rows_not_ok']} not ok in refscore); "
      f"max |dcosine| {f(res['max_abs_diff_cosine'])}, "
      f"max |dF1| {f(res['max_abs_diff_f1'])} (P {f(res['max_abs_diff_p'])}, R {f(res['max_abs_diff_r'])}), "
      f"rows with |dF1| > 1e-4: {f(res['share_abs_diff_f1_gt_1e-4'], '.2%')}"
      + ("" if res.get("share_f1_diffs_where_bert_score_higher") is None else
         f" (bert_score higher in {res['share_f1_diffs_where_bert_score_higher']:.0%} of them)"),
      file=sys.stderr)
EOF
done

# --- 6b. a second night with the persistent embedding cache ---------------------
# Night one stores the references' embeddings (--embed-cache keeps references by
# default); to keep the run short it is stood in for by scoring just the distinct
# references. Night two is the nightly file again: its references come from disk,
# its outputs (not stored) are embedded as on a new night with new outputs.
step "nightly, second night: refscore --embed-cache after a night that stored the references"
cache="$out/embed-cache"
rm -rf "$cache"
"$py" - "$out/nightly.parquet" "$out/night1.parquet" <<'EOF'
import sys
import pyarrow as pa
import pyarrow.parquet as pq
refs = sorted(set(pq.read_table(sys.argv[1], columns=["reference"]).column("reference").to_pylist()))
pq.write_table(pa.table({"id": [f"ref-{k}" for k in range(len(refs))],
                         "reference": refs, "output": refs}), sys.argv[2])
EOF
"$bin" score "$out/night1.parquet" -o "$out/night1.refscore.parquet" --overwrite --quiet \
    --metrics embedding --threads "$threads" --model "$model" --embed-cache "$cache"
"$bin" score "$out/nightly.parquet" -o "$out/night2.refscore.parquet" --overwrite --quiet \
    --metrics embedding --threads "$threads" --model "$model" --embed-cache "$cache"
"$py" - "$out" <<'EOF' >&2
import json, sys
import pyarrow.parquet as pq
out = sys.argv[1]
cols = ["cosine", "bertscore_precision", "bertscore_recall", "bertscore_f1"]
a = pq.read_table(f"{out}/nightly.refscore.parquet", columns=cols).to_pydict()
b = pq.read_table(f"{out}/night2.refscore.parquet", columns=cols).to_pydict()
same = all(a[c] == b[c] for c in cols)
d = json.load(open(f"{out}/night2.refscore.parquet.summary.json"))
e = d["embedding"]
print(f"second night: {d['rows_per_second']:.1f} rows/s, {e['embed_cache']['hits']} texts from the cache, "
      f"{e['texts_embedded']} embedded; scores identical to the uncached run: {same}")
if not same:
    sys.exit("bench-vs-python: the cached run's scores differ from the uncached run's")
EOF

# --- 7. bare PyTorch encoder ----------------------------------------------------
step "PyTorch encoder forward over the nightly set's distinct texts ($threads threads)"
"$py" scripts/bench/python.py "$out/nightly.parquet" --encoder-only \
    --threads "$threads" --model "$model" >"$out/encoder.python.json"
cat "$out/encoder.python.json" >&2

# --- 8. table --------------------------------------------------------------------
step "results"
"$py" - "$out" "$rows" "$threads" "$bin" "$cosine_tol" <<'EOF'
import json, os, platform, sys
import importlib.metadata as md

out, rows, threads, binary, cosine_tol = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], float(sys.argv[5])
load = lambda p: json.load(open(os.path.join(out, p)))  # noqa: E731

cpu = platform.processor() or "?"
try:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
except OSError:
    pass
versions = {d: md.version(d) for d in ("torch", "transformers", "sentence-transformers",
                                        "bert-score", "tokenizers")}
results = {"rows_per_set": rows, "threads": int(threads), "cpu": cpu,
           "cores": os.cpu_count(), "refscore_bin": binary, "python_versions": versions,
           "sets": {}}

def mib(b):
    return f"{b / 2**20:,.0f} MiB"

header = ("set", "rows", "refscore rows/s", "python rows/s", "ratio",
          "refscore tok/s", "refscore peak RSS", "python peak RSS")
table = []
for name in ("nightly", "distinct"):
    rs = load(f"{name}.refscore.parquet.summary.json")
    pyj = load(f"{name}.python.json")
    cmp_ = load(f"{name}.compare.json")
    emb = rs.get("embedding") or {}
    ratio = rs["rows_per_second"] / pyj["rows_per_second"]
    results["sets"][name] = {"refscore": rs, "python": pyj, "compare": cmp_, "ratio": ratio}
    table.append((name, f"{rs['rows']:,}", f"{rs['rows_per_second']:,.1f}",
                  f"{pyj['rows_per_second']:,.1f}", f"{ratio:.2f}x",
                  f"{emb.get('tokens_per_second', float('nan')):,.0f}",
                  mib(rs["peak_rss_bytes"]), mib(pyj["peak_rss_bytes"])))
night2 = load("night2.refscore.parquet.summary.json")
night2_ratio = night2["rows_per_second"] / results["sets"]["nightly"]["python"]["rows_per_second"]
results["second_night"] = {"refscore": night2, "ratio_vs_python_nightly": night2_ratio}
n2 = night2.get("embedding") or {}
table.append(("nightly, 2nd night", f"{night2['rows']:,}", f"{night2['rows_per_second']:,.1f}",
              f"{results['sets']['nightly']['python']['rows_per_second']:,.1f}",
              f"{night2_ratio:.2f}x", f"{n2.get('tokens_per_second', float('nan')):,.0f}",
              mib(night2["peak_rss_bytes"]), "(as nightly)"))
enc = load("encoder.python.json")
results["encoder_python"] = enc
nightly_emb = results["sets"]["nightly"]["refscore"].get("embedding") or {}

widths = [max(len(str(r[i])) for r in [header] + table) for i in range(len(header))]
line = lambda r: "  ".join(str(c).rjust(w) if i else str(c).ljust(w)  # noqa: E731
                           for i, (c, w) in enumerate(zip(r, widths)))
print(f"refscore vs Python (sentence-transformers + bert_score), {threads} threads, "
      f"{rows:,} rows per set, {cpu} ({os.cpu_count()} cores)")
print(line(header))
print(line(["-" * w for w in widths]))
for r in table:
    print(line(r))
print()
rs_tps = nightly_emb.get("tokens_per_second")
print(f"encoder forward, nightly set's distinct texts: PyTorch {enc['tokens_per_second']:,.0f} tok/s "
      f"({enc['texts']:,} texts, {enc['tokens']:,} word-pieces, {enc['seconds']:.2f}s); "
      f"refscore {rs_tps:,.0f} tok/s ({nightly_emb.get('texts_embedded', 0):,} texts embedded)"
      + (f"; ratio {rs_tps / enc['tokens_per_second']:.2f}x" if rs_tps else ""))
print("  (refscore: summary embedding.tokens_per_second; PyTorch: model(**tokens) only, "
      "tokenisation excluded, batches of 32 sorted by length)")
print("  2nd night: --embed-cache holding the references from an earlier night; the outputs\n"
      "  are embedded again, as new outputs would be")
print()
bad_cosine = []
for name in ("nightly", "distinct"):
    c = results["sets"][name]["compare"]
    higher = c.get("share_f1_diffs_where_bert_score_higher")
    print(f"scores, {name}: max |dcosine| {c['max_abs_diff_cosine']:.2e}, "
          f"max |dF1| {c['max_abs_diff_f1']:.2e}, rows with |dF1| > 1e-4: "
          f"{c['share_abs_diff_f1_gt_1e-4']:.2%}"
          + ("" if higher is None else f" (bert_score higher in {higher:.0%} of them)"))
    if c["max_abs_diff_cosine"] is None or c["max_abs_diff_cosine"] > cosine_tol:
        bad_cosine.append(name)
print("  BERTScore differences are expected: bert_score's default batching (batch_size=64) pads\n"
      "  each batch of pairs and lets padded positions count as similarity 0 inside the max,\n"
      "  which inflates some of its scores (docs/metrics.md#embedding-metrics); refscore computes the unpadded formula.\n"
      f"  Cosine must agree within {cosine_tol:g} (docs/metrics.md#embedding-metrics).")
results["cosine_tolerance"] = cosine_tol
results["cosine_ok"] = not bad_cosine
precisions = os.environ.get("BENCH_PRECISIONS_LIST", "").split()
if precisions:
    import numpy as np
    import pyarrow.parquet as pq
    print("\nreduced precisions (side by side with the fp32 run above, same set and threads):")
    results["precisions"] = {}
    for name in ("nightly", "distinct"):
        base = load(f"{name}.refscore.parquet.summary.json")
        t32 = pq.read_table(os.path.join(out, f"{name}.refscore.parquet"))
        for p in precisions:
            rs = load(f"{name}.refscore.{p}.parquet.summary.json")
            tp = pq.read_table(os.path.join(out, f"{name}.refscore.{p}.parquet"))
            dev = {}
            for col in ("cosine", "bertscore_f1"):
                a = np.array(t32[col].to_pylist(), dtype=float)
                b = np.array(tp[col].to_pylist(), dtype=float)
                d = np.abs(a - b)[~np.isnan(a)]
                dev[col] = float(d.max()) if d.size else None
            ratio = rs["rows_per_second"] / base["rows_per_second"]
            results["precisions"].setdefault(name, {})[p] = {
                "rows_per_second": rs["rows_per_second"], "vs_fp32": ratio, "max_abs_diff": dev}
            print(f"  {name} {p}: {rs['rows_per_second']:,.1f} rows/s ({ratio:.2f}x fp32), "
                  f"max |dcosine| {dev['cosine']:.2e}, max |dF1| {dev['bertscore_f1']:.2e}")
with open(os.path.join(out, "bench-results.json"), "w") as fh:
    json.dump(results, fh, indent=2)
print(f"\nall numbers: {os.path.join(out, 'bench-results.json')}")
if bad_cosine:
    print(f"bench-vs-python: cosine differs by more than {cosine_tol:g} on: {', '.join(bad_cosine)}",
          file=sys.stderr)
    sys.exit(1)
EOF
