#!/usr/bin/env bash
# The project's test command (README.md, .ci/run): builds once, runs the Rust
# unit and integration tests, then reads real output back with DuckDB and
# Polars. Installs what it needs itself: the model (scripts/fetch-model.sh) and
# a Python virtualenv for the read-back checks (outside the repo).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
venv="${REFSCORE_TEST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/refscore/venv-test}"

echo "== model"
scripts/fetch-model.sh

echo "== python tools for read-back checks ($venv)"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/python/requirements.txt

echo "== cargo test (release)"
cargo test --release --workspace --locked

echo "== read-back with DuckDB and Polars"
REFSCORE_BIN="$target_dir/release/refscore" "$venv/bin/python" -m pytest -q tests/python
