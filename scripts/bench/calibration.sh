#!/usr/bin/env bash
# Seconds and peak RSS of the calibration figures on a judged result of 1M
# and 10M rows with 1,000 human labels (docs/performance.md): `report --gold`
# (agreement, calibration, corrected figures, the page) and `calibrate-band`.
# Memory must stay flat from 1M to 10M rows: the unlabelled rows are sums.
# Inputs are generated (scripts/fixtures/make-calibration-bench.py).
#
# usage: scripts/bench/calibration.sh [ROWS...]   (default: 1000000 10000000)
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
  f="$dir/result-$rows.parquet"
  [ -f "$f" ] || "$python" "$root/scripts/fixtures/make-calibration-bench.py" "$rows" 1000 "$f"
  measure "$rows rows, report (no labels)" "$bin" report "$f" --json "$dir/plain.json" --quiet
  measure "$rows rows, report --gold (2 metrics, 1,000 labels)" "$bin" report "$f" \
    --gold meaning_match=human_verdict --gold similarity=human_score --json "$dir/gold.json" --quiet
  measure "$rows rows, calibrate-band" "$bin" calibrate-band "$f" --gold human_verdict \
    --by cosine --max-error 0.05 --quiet
done
echo "(files in $dir)"
