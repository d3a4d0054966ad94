#!/usr/bin/env bash
# Benchmarks the Python package's paths against the CLI on the same files, in
# one run; figures go to docs/performance.md.
#
#   scripts/bench/python.sh           # CLI, Scorer.score and the Ray paths (python-paths.py)
#   scripts/bench/python.sh spark     # CLI and refscore.spark, 1 and 2 executors (spark-paths.py)
#
# Builds the CLI and the wheel (reusing $CARGO_TARGET_DIR) and installs the
# wheel and the test requirements (Ray and pyspark included) into a virtualenv.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
case "${1:-ray}" in
  ray) bench=scripts/bench/python-paths.py ;;
  spark) bench=scripts/bench/spark-paths.py ;;
  *) echo "usage: scripts/bench/python.sh [ray|spark]" >&2; exit 64 ;;
esac
target_dir="${CARGO_TARGET_DIR:-$root/target}"
venv="${REFSCORE_BENCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/refscore/venv-bench-python}"
scripts/fetch-model.sh
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/python/requirements.txt
cargo build --release --locked --bin refscore
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps \
  "$(PYTHON="$venv/bin/python" scripts/env/build-wheel.sh)"
lscpu | grep -E 'Model name|CPU family|^Model:' || true
REFSCORE_BIN="$target_dir/release/refscore" "$venv/bin/python" "$bench"
