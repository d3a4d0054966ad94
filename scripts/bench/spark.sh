#!/usr/bin/env bash
# Benchmarks refscore.spark against the CLI on the same files, in one run
# (scripts/bench/spark-paths.py): the job mode and score(df) on a standalone
# Spark on 127.0.0.1 with 1 and 2 executors; figures go to docs/performance.md.
# Builds the CLI and the wheel (reusing $CARGO_TARGET_DIR) and installs the
# wheel and the test requirements (pyspark included) into a virtualenv.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
venv="${REFSCORE_BENCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/refscore/venv-bench-python}"
scripts/fetch-model.sh
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/python/requirements.txt
cargo build --release --locked --bin refscore
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps \
  "$(PYTHON="$venv/bin/python" scripts/env/build-wheel.sh)"
lscpu | grep -E 'Model name|CPU family|^Model:' || true
REFSCORE_BIN="$target_dir/release/refscore" "$venv/bin/python" scripts/bench/spark-paths.py
