#!/usr/bin/env bash
# Seconds and peak RSS of `refscore report` at 1M and 10M rows, with and
# without a baseline (docs/performance.md). Inputs are generated
# (scripts/fixtures/make-report-bench.py), scored with the real binary (lexical
# metrics, `--keep category`), then reported on: alone, and against last
# night's run with --by category and texts joined from --input.
#
# usage: scripts/bench/report.sh [ROWS...]   (default: 1000000 10000000)
# env:   REFSCORE_BIN (default target/release/refscore), PYTHON (with numpy and
#        pyarrow; default the test venv), BENCH_DIR (default a temporary folder)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="${REFSCORE_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/refscore}"
python="${PYTHON:-${XDG_CACHE_HOME:-$HOME/.cache}/refscore/venv-test/bin/python}"
dir="${BENCH_DIR:-$(mktemp -d)}"
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1000000 10000000)

source "$root/scripts/common/measure.sh"

cpu_line
echo "| case | seconds | peak RSS |"
echo "| --- | ---: | ---: |"
for rows in "${sizes[@]}"; do
  d="$dir/$rows"
  if [ ! -f "$d/cur.scores.parquet" ]; then
    "$python" "$root/scripts/fixtures/make-report-bench.py" "$rows" "$d"
    for night in base cur; do
      "$bin" score "$d/$night.parquet" -o "$d/$night.scores.parquet" --metrics lexical \
        --keep category --quiet --overwrite
    done
  fi
  measure "$rows rows, one run" "$bin" report "$d/cur.scores.parquet" \
    -o "$d/one.html" --json "$d/one.json" --quiet
  measure "$rows rows, with baseline, --by category, --input" "$bin" report "$d/cur.scores.parquet" \
    --baseline "$d/base.scores.parquet" --by category --input "$d/cur.parquet" \
    -o "$d/two.html" --json "$d/two.json" --quiet
done
echo "(files in $dir)"
