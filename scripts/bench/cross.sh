#!/usr/bin/env bash
# Cross-encoders on the CPU, side by side in one run: refscore's NLI metrics
# (--metrics nli: both directions of every pair) against sentence-transformers'
# CrossEncoder.predict(apply_softmax=True) on the same pairs, the same threads,
# real-size models with seeded random weights made by transformers' own classes
# (scripts/bench/cross.py make: MiniLM-L6's shape, that of
# cross-encoder/ms-marco-MiniLM-L6-v2; DeBERTa-v3-base; ModernBERT-base), on the
# all-distinct benchmark set (scripts/fixtures/make-bench-sets.py: no pair
# repeats, so no cache helps). The scores are compared (TOL, default 1e-4).
#
# Usage:
#   scripts/bench/cross.sh                  # every model
#   MODELS=minilm ROWS=500 scripts/bench/cross.sh
#
# Environment:
#   MODELS        default "minilm deberta modernbert"
#   ROWS          rows per model (default: minilm 2000, the others 200; a base
#                 model on 2 cores scores a few pairs a second)
#   THREADS       refscore's --threads and torch's threads (default 2)
#   BATCH         CrossEncoder.predict's batch_size (default 32, its own)
#   PRECISION     refscore's --precision: fp32 (default), bf16 or int8;
#                 CrossEncoder stays fp32, so the difference printed is the
#                 reduced precision's deviation (set TOL to what it may be)
#   REFSCORE_BIN  default target/release/refscore (or $CARGO_TARGET_DIR's)
#   PYTHON_BENCH  a Python with torch, transformers, sentence-transformers and
#                 pyarrow (default the venv scripts/bench/vs-python.sh makes,
#                 $REFSCORE_BENCH_VENV or ~/.cache/refscore/venv-bench)
#   SET           distinct (default: no text repeats) or nightly (each
#                 reference with 20 outputs; make-bench-sets.py), ROWS rows of it
#   COMPARE       1 (default) runs CrossEncoder.predict beside refscore; 0 runs
#                 refscore alone (rows/s and RSS of a long night, where torch
#                 would take as long again)
#   OUT           work folder (default /tmp/refscore-cross-bench)
#
# Prints one line per model: pairs/s of each engine (whole runs: model loading
# included; refscore's reading and writing too, Python's imports not), the
# ratio, refscore's forward-only pairs/s and peak RSS, and the largest score
# difference. Exit 1 when a difference exceeds TOL.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
log() { echo "cross.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }
bin="${REFSCORE_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/refscore}"
py="${PYTHON_BENCH:-${REFSCORE_BENCH_VENV:-$HOME/.cache/refscore/venv-bench}/bin/python}"
threads="${THREADS:-2}"
precision="${PRECISION:-fp32}"
set="${SET:-distinct}"
compare="${COMPARE:-1}"
case "$set" in distinct | nightly) ;; *) die "SET must be distinct or nightly, not '$set'" ;; esac
batch="${BATCH:-32}"
out="${OUT:-/tmp/refscore-cross-bench}"
tol="${TOL:-1e-4}"
[ -x "$bin" ] || die "no refscore binary at $bin (cargo build --release, or set REFSCORE_BIN)"
"$py" -c 'import torch, transformers, sentence_transformers, pyarrow' 2>/dev/null ||
  die "$py lacks torch, transformers, sentence-transformers or pyarrow: run scripts/bench/vs-python.sh once (it makes that venv) or set PYTHON_BENCH"
scripts/fetch-model.sh >/dev/null
mkdir -p "$out"
log "$(lscpu | grep -m1 'Model name' | cut -d: -f2 | xargs), family $(lscpu | grep -m1 'CPU family' | cut -d: -f2 | xargs) model $(lscpu | grep -m1 '^Model:' | cut -d: -f2 | xargs), $(nproc) CPUs; threads $threads; refscore --precision $precision"
status=0
printf '%-10s %6s %14s %14s %7s %16s %10s %9s\n' model rows "refscore p/s" "ST p/s" ratio "forward-only p/s" "peak MiB" "max diff"
for model in ${MODELS:-minilm deberta modernbert}; do
  case "$model" in
    minilm) tokenizer=models/all-MiniLM-L6-v2 default_rows=2000 ;;
    deberta) tokenizer=tests/fixtures/models/tiny-cross-deberta-v3-nli default_rows=200 ;;
    modernbert) tokenizer=tests/fixtures/models/tiny-cross-modernbert-nli default_rows=200 ;;
    *) die "unknown model '$model' (minilm, deberta, modernbert)" ;;
  esac
  rows="${ROWS:-$default_rows}"
  # The sets of 2,000 rows serve every run up to that size; a larger run gets
  # its own (the generator is deterministic, so a set is made once).
  sets="$out/sets"
  [ "$rows" -le 2000 ] || sets="$out/sets-$rows"
  [ -f "$sets/$set.parquet" ] ||
    "$py" scripts/fixtures/make-bench-sets.py --rows "$(( rows > 2000 ? rows : 2000 ))" "$sets" >/dev/null
  dir="$out/$model"
  [ -f "$dir/model.safetensors" ] || "$py" scripts/bench/cross.py make "$model" "$tokenizer" "$dir" >/dev/null 2>&1
  "$py" scripts/bench/cross.py head "$rows" "$sets/$set.parquet" "$out/$model-in.parquet"
  "$bin" score "$out/$model-in.parquet" -o "$out/$model-refscore.parquet" --overwrite --quiet \
    --metrics nli --cross-model "$dir" --device cpu --threads "$threads" --precision "$precision"
  if [ "$compare" = 0 ]; then
    "$py" - "$out/$model-refscore.parquet" "$model" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1] + ".summary.json"))
pairs = 2 * s["rows"]
print(f"{sys.argv[2]:<10} {s['rows']:>6} {pairs / s['seconds']:>14.1f} {'-':>14} {'-':>7} "
      f"{s['cross']['pairs_per_second']:>16.1f} {s['peak_rss_bytes'] / 2**20:>10.0f} {'-':>9}")
EOF
    continue
  fi
  THREADS="$threads" "$py" scripts/bench/cross.py predict "$dir" "$out/$model-in.parquet" \
    "$out/$model-st.parquet" --device cpu --batch-size "$batch" 2>/dev/null >"$out/$model-st.json"
  "$py" - "$out/$model-refscore.parquet" "$out/$model-st.parquet" "$out/$model-st.json" "$model" "$tol" <<'EOF' || status=1
import json, sys
import pyarrow.parquet as pq
ours, theirs, st_json, model, tol = sys.argv[1:]
a, b = pq.read_table(ours), pq.read_table(theirs)
s = json.load(open(ours + ".summary.json"))
st = json.load(open(st_json))
cols = ["nli_precision", "nli_recall", "nli_equivalence", "nli_contradiction"]
diff = max(abs(x - y) for c in cols for x, y in zip(a.column(c).to_pylist(), b.column(c).to_pylist()))
pairs = 2 * s["rows"]
ours_ps = pairs / s["seconds"]
print(f"{model:<10} {s['rows']:>6} {ours_ps:>14.1f} {st['pairs_per_second']:>14.1f} "
      f"{ours_ps / st['pairs_per_second']:>6.2f}x {s['cross']['pairs_per_second']:>16.1f} "
      f"{s['peak_rss_bytes'] / 2**20:>10.0f} {diff:>9.1e}")
sys.exit(0 if diff <= float(tol) else 1)
EOF
done
exit "$status"
