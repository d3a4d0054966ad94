#!/usr/bin/env bash
# A chunked FactCG-shaped checker at real size on the CPU (issue 67): refscore's
# `--metrics cross_score --cross-recipe factcg` at fp32, bf16 and int8 against
# the authors' own code (derenlei/FactCG's FactCGScore(...).score, run as
# scripts/fixtures/make-recipe-parity-fixture.py runs it: extracted from a
# clone into a temporary folder, only the model download and NLTK's data
# download bypassed), on the same rows, the same threads, interleaved
# (fp32, bf16, int8, authors, then again) so that every engine sees the same
# load; scores compared with the authors' (TOL for fp32).
#
# The model is DeBERTa-v3-large's shape (FactCG-DeBERTa-v3-Large's body) with
# seeded random weights made by transformers' own classes, and the tokenizer of
# tests/fixtures/models/tiny-cross-checker-deberta (no real DeBERTa-v3
# tokenizer is reachable here; see scripts/bench/checker.py). The rows have
# long references (WORDS words: several FactCG chunks each) and short claims.
#
# Usage:
#   scripts/bench/checker.sh                 # make (once), then run
#   scripts/bench/checker.sh make            # the model and the rows only
#   ROWS=12 REPS=2 scripts/bench/checker.sh run
#
# Environment:
#   ROWS          rows (default 2: DeBERTa-v3-large on 2 shared cores takes
#                 15 s (refscore) to 45 s (torch) a full chunk, so the default
#                 run, 4 engines twice, is about 15 minutes; 1,000 rows would be
#                 hours: extrapolate from the s/row column)
#   WORDS         words per reference (default 700: 2 FactCG chunks, one of
#                 550 NLTK words and one of about 250, some 1,600 pieces of
#                 this tokenizer a row)
#   REPS          runs of each engine (default 2); medians are printed
#   ENGINES       default "fp32 bf16 int8 authors" (refscore's precisions, and
#                 the authors' code, always fp32)
#   THREADS       refscore's --threads and torch's threads (default 2)
#   BATCH         FactCGScore's batch_size (default 16, their README's)
#   TOL           largest fp32 difference from the authors' scores (default 1e-4)
#   FACTCG_GIT    git directory of a derenlei/FactCG clone (default
#                 /work/.mirror/derenlei+FactCG/repo where it exists)
#   REFSCORE_BIN  default target/release/refscore (or $CARGO_TARGET_DIR's)
#   PYTHON_BENCH  a Python with torch, transformers, nltk, pytorch_lightning and
#                 pyarrow (default ~/.cache/refscore/venv-anchors/bin/python)
#   OUT           work folder, outside the repository (default
#                 ~/.cache/refscore/checker-bench; the model is 1.7 GB)
#
# Timing: every engine is timed as a whole process with /usr/bin/time (wall
# and peak RSS): refscore's run includes loading the model, reading, chunking,
# scoring and writing; the authors' includes Python's imports and extracting
# their package too, so their load + score (FactCGScore(...) and .score, what a
# user who keeps the process waits for) is printed beside it and a second ratio
# is taken against it. Writes $OUT/checker-table.md and .tsv; exit 1 when fp32
# differs from the authors' scores by more than TOL.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
log() { echo "checker.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }
bin="${REFSCORE_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/refscore}"
py="${PYTHON_BENCH:-$HOME/.cache/refscore/venv-anchors/bin/python}"
rows="${ROWS:-2}"
words="${WORDS:-700}"
reps="${REPS:-2}"
engines="${ENGINES:-fp32 bf16 int8 authors}"
threads="${THREADS:-2}"
batch="${BATCH:-16}"
tol="${TOL:-1e-4}"
out="${OUT:-$HOME/.cache/refscore/checker-bench}"
factcg_git="${FACTCG_GIT:-/work/.mirror/derenlei+FactCG/repo}"
what="${1:-all}"
case "$what" in all | make | run) ;; *) die "usage: $0 [make|run]" ;; esac
"$py" -c 'import torch, transformers, nltk, pytorch_lightning, pyarrow' 2>/dev/null ||
  die "$py lacks torch, transformers, nltk, pytorch_lightning or pyarrow (set PYTHON_BENCH)"
model="$out/factcg-v3-large-shape"
set_file="$out/rows-$rows-$words.parquet"
mkdir -p "$out"

if [ "$what" != run ]; then
  [ -f "$model/model.safetensors" ] || "$py" scripts/bench/checker.py make "$model"
  [ -f "$set_file" ] || "$py" scripts/bench/checker.py rows "$rows" "$words" "$set_file"
  [ "$what" = make ] && exit 0
fi
[ -f "$model/model.safetensors" ] && [ -f "$set_file" ] || die "run '$0 make' first (same ROWS and WORDS)"
[ -x "$bin" ] || die "no refscore binary at $bin (cargo build --release --bin refscore, or set REFSCORE_BIN)"
case " $engines " in *" authors "*)
  git --git-dir "$factcg_git" rev-parse HEAD >/dev/null 2>&1 ||
    die "FACTCG_GIT=$factcg_git is no git directory of a derenlei/FactCG clone" ;;
esac

log "$(lscpu | grep -m1 'Model name' | cut -d: -f2 | xargs), family $(lscpu | grep -m1 'CPU family' | cut -d: -f2 | xargs) model $(lscpu | grep -m1 '^Model:' | cut -d: -f2 | xargs), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $rows rows of $words words; threads $threads; reps $reps; engines $engines"
runs="$out/runs-$rows-$words.tsv"
: >"$runs"
for rep in $(seq 1 "$reps"); do
  for engine in $engines; do
    dst="$out/out-$engine-$rep.parquet"
    timing="$out/time-$engine-$rep.txt"
    case "$engine" in
      fp32 | bf16 | int8)
        /usr/bin/time -f '%e %M' -o "$timing" "$bin" score "$set_file" -o "$dst" --overwrite --quiet \
          --metrics cross_score --cross-model "$model" --cross-recipe factcg \
          --precision "$engine" --device cpu --threads "$threads" ;;
      authors)
        /usr/bin/time -f '%e %M' -o "$timing" "$py" scripts/bench/checker.py authors "$model" "$set_file" \
          "$dst" --factcg-git "$factcg_git" --threads "$threads" --batch-size "$batch" \
          >"$dst.json" 2>"$out/authors-$rep.log" || { tail -20 "$out/authors-$rep.log" >&2; die "the authors' run failed"; } ;;
      *) die "unknown engine '$engine' (fp32, bf16, int8, authors)" ;;
    esac
    read -r wall rss <"$timing"
    printf '%s\t%s\t%s\t%s\t%s\n' "$engine" "$rep" "$wall" "$rss" "$dst" >>"$runs"
    log "rep $rep $engine: ${wall} s, peak RSS $((rss / 1024)) MiB, load $(cut -d' ' -f1-3 /proc/loadavg)"
  done
done
"$py" scripts/bench/checker.py report "$runs" "$out/checker-table.tsv" "$out/checker-table.md" "$tol"
