#!/usr/bin/env bash
# Builds refscore with `--features cuda` on a machine without CUDA or a GPU:
# CUDA's compiler, headers and libraries come from PyPI's NVIDIA wheels, pinned
# to CUDA 13.0 (the device machines run driver 580, whose CUDA is 13.0: PTX from
# a newer nvcc would not load there).
#
# Usage:
#   scripts/env/build-cuda.sh           # release binary: target/cuda/release/refscore
#   scripts/env/build-cuda.sh --check   # `cargo check` of refscore-embed with its cuda
#                                       # feature (no linking): what the test command runs
#                                       # to keep the feature compiling. The feature reaches
#                                       # only that crate and Candle (no other crate has
#                                       # cuda-gated code), so the rest of the workspace,
#                                       # the same with or without it, is not checked twice
#   scripts/env/build-cuda.sh --env     # prints the environment lines the build uses
#
# Settings (environment):
#   CUDA_COMPUTE_CAP        compute capability of the kernels (default 90: Hopper)
#   REFSCORE_CUDA_HOME      where the toolkit is unpacked (default
#                           ${XDG_CACHE_HOME:-~/.cache}/refscore/cuda-13.0)
#   CARGO_TARGET_DIR        default: target/cuda, apart from the CPU build's folder
#
# How: pip unpacks the wheels (no virtual environment needed: --target) into one
# tree, nvidia/cu13/{bin,nvvm,include,lib}. Two things the wheels lack are made
# here: the targets/x86_64-linux links nvcc's profile expects, and the link-time
# libraries: unversioned names for the versioned .so files, and a stub libcuda.so
# (the driver's library, which only an NVIDIA driver installs) with every driver
# function cuda.h declares, soname libcuda.so.1, kept under lib/stubs so that it is
# only ever linked against: at run time the real driver's libcuda.so.1 is loaded.
# On the GPU machine the binary needs the CUDA 13 libraries (cuBLAS, cuRAND, NVRTC)
# on LD_LIBRARY_PATH: this toolkit's lib/ carried along, or PyTorch's nvidia/cu13/lib.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

mode=build
case "${1:-}" in
  "") ;;
  --check) mode=check ;;
  --env) mode=env ;;
  -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
  *) echo "build-cuda.sh: unknown option '$1' (see --help)" >&2; exit 64 ;;
esac

home="${REFSCORE_CUDA_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/refscore/cuda-13.0}"
cap="${CUDA_COMPUTE_CAP:-90}"
log() { echo "build-cuda.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

case "$cap" in
  ''|*[!0-9]*) die "CUDA_COMPUTE_CAP=$cap: expected a number such as 90 (Hopper) or 80 (Ampere)" ;;
esac

# The wheels, one CUDA release. The check needs the compiler and headers only;
# the build also links cuBLAS, cuRAND and NVRTC.
compile_wheels=(
  nvidia-cuda-nvcc==13.0.88
  nvidia-nvvm==13.0.88
  nvidia-cuda-crt==13.0.88
  nvidia-cuda-runtime==13.0.96
  nvidia-cuda-cccl==13.0.85
)
link_wheels=(
  nvidia-cuda-nvrtc==13.0.88
  nvidia-cublas==13.0.2.14
  nvidia-curand==10.4.0.35
)
top="$home/site/nvidia/cu13"

# Installs the wheels into one tree. pip --target replaces a package folder it
# installs into, and all of these share nvidia/, so the whole set goes in one
# call; the list installed is kept, and a smaller set is never reinstalled.
install() {
  local mark="$home/installed.txt" w missing=0
  for w in "$@"; do
    grep -qxF "$w" "$mark" 2>/dev/null || missing=1
  done
  [ "$missing" = 0 ] && return
  rm -rf "$home/site"
  mkdir -p "$home"
  log "installing CUDA 13.0 from the package index into $home ($# wheels)"
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --no-deps --no-compile --only-binary=:all: --target "$home/site" "$@" \
    || die "could not install the CUDA wheels ($*)"
  printf '%s\n' "$@" >"$mark"
}

# nvcc's profile looks for headers and libraries under targets/x86_64-linux.
layout() {
  chmod +x "$top"/bin/* "$top"/nvvm/bin/* 2>/dev/null || true
  mkdir -p "$top/targets/x86_64-linux" "$top/lib/stubs"
  ln -sfn ../../include "$top/targets/x86_64-linux/include"
  ln -sfn ../../lib "$top/targets/x86_64-linux/lib"
}

# Unversioned names for the linker, and the driver stub.
link_libraries() {
  local lib="$top/lib" f
  for f in libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libnvrtc.so.13 libcudart.so.13; do
    [ -e "$lib/$f" ] || die "$lib/$f is missing from the wheels"
    ln -sfn "$f" "$lib/${f%%.so.*}.so"
  done
  local stub="$lib/stubs/libcuda.so"
  [ -f "$stub" ] && return
  log "making the link-time stub of the driver library (libcuda.so.1)"
  local work
  work="$(mktemp -d)"
  # Every driver function cuda.h declares, under its exported (versioned) name.
  cc -E -P -I"$top/include" "$top/include/cuda.h" | tr '\n' ' ' \
    | grep -oE 'CUresult[[:space:]]+(CUDAAPI[[:space:]]+)?cu[A-Z][A-Za-z0-9_]*[[:space:]]*\(' \
    | sed -E 's/^CUresult[[:space:]]+(CUDAAPI[[:space:]]+)?//; s/[[:space:]]*\($//' \
    | sort -u >"$work/symbols"
  [ "$(wc -l <"$work/symbols")" -gt 100 ] || die "found too few driver functions in cuda.h"
  # 999 is CUDA_ERROR_UNKNOWN; the stub is never loaded, only linked against.
  sed 's/.*/int &(void) { return 999; }/' "$work/symbols" >"$work/stub.c"
  cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$stub" "$work/stub.c"
  rm -rf "$work"
}

if [ "$mode" = check ]; then
  install "${compile_wheels[@]}"
  layout
else
  install "${compile_wheels[@]}" "${link_wheels[@]}"
  layout
  link_libraries
fi

export PATH="$top/bin:$PATH"
export CUDA_ROOT="$top" CUDA_PATH="$top" CUDA_HOME="$top"
export CUDA_COMPUTE_CAP="$cap"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/cuda}"
nvcc --version | grep -q 'release 13\.0' || die "nvcc is not CUDA 13.0: $(nvcc --version | tail -n 1)"

if [ "$mode" = env ]; then
  echo "export PATH=\"$top/bin:\$PATH\" CUDA_ROOT=\"$top\" CUDA_COMPUTE_CAP=$cap CARGO_TARGET_DIR=\"$CARGO_TARGET_DIR\""
  echo "# at run time on a GPU machine: LD_LIBRARY_PATH=$top/lib (or PyTorch's nvidia/cu13/lib)"
  exit 0
fi

start=$SECONDS
if [ "$mode" = check ]; then
  gated="$(grep -rlE --include='*.rs' 'feature *= *"cuda"' crates | grep -v '^crates/embed/' || true)"
  [ -z "$gated" ] || die "cuda-gated code outside crates/embed ($gated): check the binary instead"
  log "cargo check -p refscore-embed --features cuda (compute capability $cap) into $CARGO_TARGET_DIR"
  cargo check --release --locked -p refscore-embed --features cuda --lib
else
  log "cargo build --release --features cuda (compute capability $cap) into $CARGO_TARGET_DIR"
  cargo build --release --locked --features cuda --bin refscore
  bin="$CARGO_TARGET_DIR/release/refscore"
  log "built $bin ($(du -h "$bin" | cut -f1)); it needs: $(readelf -d "$bin" | grep -oE 'lib(cuda|cudart|cublas|cublasLt|curand|nvrtc)\.so[.0-9]*' | sort -u | tr '\n' ' ')"
fi
log "done in $((SECONDS - start)) s"
