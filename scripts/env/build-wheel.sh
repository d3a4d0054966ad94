#!/usr/bin/env bash
# Builds the `refscore` Python wheel (crates/python: the CLI's Rust library
# wrapped with pyo3, plus the `refscore` console script) with maturin, and
# prints the wheel's path. The Rust build reuses $CARGO_TARGET_DIR, so after a
# `cargo build --release` only the binding itself is compiled.
#
#   scripts/env/build-wheel.sh [OUTDIR]      # default OUTDIR: $CARGO_TARGET_DIR/wheels
#   PYTHON=/path/to/venv/bin/python scripts/env/build-wheel.sh   # the interpreter to build for
#   REFSCORE_CUDA=1 scripts/env/build-wheel.sh                   # with the CUDA encoder
#   pip install "$(scripts/env/build-wheel.sh)"
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
python="${PYTHON:-python3}"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
out="${1:-$target_dir/wheels}"
# maturin is a build tool: it goes into the interpreter's environment.
maturin_version=1.16.0
if ! "$python" -m maturin --version 2>/dev/null | grep -q " $maturin_version\$"; then
  "$python" -m pip install --quiet --disable-pip-version-check "maturin==$maturin_version" >&2
fi
features=()
# REFSCORE_CUDA=1: the encoder can run on CUDA GPUs (needs the CUDA toolkit).
if [ "${REFSCORE_CUDA:-0}" = 1 ]; then features=(--features cuda); fi
rm -f "$out"/refscore-*.whl
CARGO_TARGET_DIR="$target_dir" "$python" -m maturin build --release --locked \
  -m crates/python/Cargo.toml -i "$python" -o "$out" "${features[@]}" >&2
ls "$out"/refscore-*.whl
