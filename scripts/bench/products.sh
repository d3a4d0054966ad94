#!/usr/bin/env bash
# One matrix product per precision at the encoder's real shapes (the four
# products of an all-MiniLM-L6-v2 layer, 2048 rows), ours against oneDNN's, in
# one run on one machine with the same thread count. It answers "would a
# library's kernels be faster than our tiles?" (issue 21, docs/performance.md).
#
#   ours:   the embed crate's `product_speed` measurement (an ignored unit test:
#           it reaches the crate-private kernels), timing each product whole:
#           our fp32 is gemm's (Candle's matmul); bf16 and int8 include pairing or
#           quantising the activations and writing f32 results;
#   oneDNN: Debian's libdnnl (2.6) matmul, weights reordered once, product only
#           (f32 x f32, bf16 x bf16 -> f32, u8 x s8 -> s32), built from
#           scripts/bench/products-onednn.cpp;
#   onnxruntime: f32 MatMul, and the int8 product its dynamic quantisation
#           runs (quantise activations, MatMulInteger, scale), whole
#           (scripts/bench/products-ort.py, a virtualenv outside the repository).
#
# Prints the CPU (lscpu model name, family/model, the relevant flags) first:
# figures from different CPUs are not comparable.
#
# Usage: scripts/bench/products.sh
# Environment: THREADS (default 2), REFSCORE_PRODUCT_ROWS (default 2048),
#              CARGO_TARGET_DIR as for cargo, REFSCORE_PRODUCTS_VENV (default
#              ~/.cache/refscore/venv-products), PYTHON (default python3).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
threads="${THREADS:-2}"
export REFSCORE_BENCH_THREADS="$threads" OMP_NUM_THREADS="$threads"

echo "== CPU"
lscpu | sed -n 's/^Model name:[[:space:]]*/model name: /p; s/^CPU family:[[:space:]]*/family: /p; s/^Model:[[:space:]]*/model: /p'
echo "flags: $(grep -o -w -E 'avx2|fma|avx512f|avx512vl|avx512_vnni|avx512_bf16|amx_bf16|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')"

echo "== ours (refscore-embed, product_speed)"
cargo test --release --locked -p refscore-embed --lib product_speed -- --ignored --nocapture 2>/dev/null |
    grep -E '^(product|qkv|attention out|ff in|ff out),'

echo "== oneDNN (Debian libdnnl)"
scripts/env/system-deps.sh libdnnl-dev g++
bin="${CARGO_TARGET_DIR:-$root/target}/bench_products_onednn"
g++ -O2 -std=c++17 -o "$bin" scripts/bench/products-onednn.cpp -ldnnl
ONEDNN_VERBOSE=1 "$bin" > "$bin.log"
grep -v '^onednn_verbose' "$bin.log"
echo "oneDNN's kernels: $(grep -o 'brg:[a-z0-9_]*\|gemm:[a-z0-9_]*\|jit:[a-z0-9_]*' "$bin.log" | sort | uniq -c | tr -s ' ' | tr '\n' ';')"

echo "== onnxruntime"
venv="${REFSCORE_PRODUCTS_VENV:-$HOME/.cache/refscore/venv-products}"
if [[ ! -x "$venv/bin/python" ]]; then
    "${PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/pip" install --quiet onnxruntime onnx numpy
fi
THREADS="$threads" "$venv/bin/python" scripts/bench/products-ort.py
