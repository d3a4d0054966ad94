#!/usr/bin/env bash
# The fp32 ceiling of this CPU (scripts/bench/fma-peak.c): GFLOP/s of 256-bit
# and, where the CPU has them, 512-bit fused multiply-adds from registers, on
# one thread and on THREADS (default 2); beside it the AVX2 int8 tiles' step
# (`vpmaddwd` + `vpaddd`, G ops/s). Prints the CPU first: a ceiling
# belongs to one CPU. Run it on an idle machine: it measures the clock too.
#
# Usage: scripts/bench/peak.sh        Environment: THREADS, ITERS (default 2e8)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
threads="${THREADS:-2}"
lscpu | sed -n 's/^Model name:[[:space:]]*/model name: /p; s/^CPU family:[[:space:]]*/family: /p; s/^Model:[[:space:]]*/model: /p'
echo "flags: $(grep -o -w -E 'avx2|fma|avx512f|avx512_bf16|avx512_vnni|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
bin="$(mktemp -d)/fma-peak"
trap 'rm -rf "$(dirname "$bin")"' EXIT
# -funroll-all-loops keeps the chains in registers (checked with objdump:
# one vfmadd per chain per iteration, no loads).
gcc -O3 -funroll-all-loops -pthread "$root/scripts/bench/fma-peak.c" -o "$bin"
"$bin" "$threads" "${ITERS:-200000000}"
