#!/usr/bin/env bash
# The GPU check and benchmark in one command, for a machine with an NVIDIA GPU
# and no Rust, no registry and no model hub (the device machines: CUDA 13 driver,
# PyTorch with sentence-transformers, pandas, pyarrow and nvidia-ml-py).
#
#   scripts/bench/gpu.sh pack   here: puts what the GPU machine lacks into .gpu/
#                               (git-ignored, so `run` can carry it): the CUDA binary
#                               (scripts/env/build-cuda.sh) stripped and xz-compressed;
#                               all-MiniLM-L6-v2 with its matrices as int8 rows and
#                               one scale per row (to fit one 64 MiB transfer with
#                               the repository; widened back to f32 there, so every
#                               engine reads the same weights); all-mpnet-base-v2's
#                               files and the shapes of its weights (seeded random
#                               weights are made there: the same work, no 420 MB);
#                               the bert-score wheel; with REFSCORE_CUDA_BASE_BIN,
#                               a second binary to time side by side (the build
#                               before a change), and then MINILM_WEIGHTS=random
#                               carries MiniLM's shapes only, as mpnet's, to fit
#   scripts/bench/gpu.sh run    there, from the repository root with .gpu/ carried:
#                               1. parity: the GPU's results against the same
#                                  binary's CPU fp32, at most TOL (1e-4) apart on
#                                  every metric column: MiniLM (plain, --idf,
#                                  --layer 3), mpnet, and every tiny family under
#                                  tests/fixtures/models, plain and at its fixture's
#                                  --layer with --idf; a static model must be refused
#                                  (PARITY=short: MiniLM's three, mpnet, tiny-gte
#                                  and tiny-roberta only; PARITY_MATCH, a shell
#                                  pattern such as 'tiny-deberta*', keeps the tiny
#                                  families it matches);
#                               2. refscore --device cuda, fp32, on the nightly set
#                                  (20 outputs per reference) and the all-distinct
#                                  set of ROWS rows, and the nightly set of BIG_ROWS
#                                  rows (made there by make-bench-sets.py), each
#                                  sampled through NVML (utilisation, memory); the
#                                  base binary, where packed, before each run;
#                               3. sentence-transformers + bert_score as a user runs
#                                  them on the same GPU and sets, and the bare
#                                  PyTorch encoder in fp32 and bf16;
#                               4. cross: every tiny-cross-* fixture on the GPU
#                                  against the CPU (--metrics cross), then two
#                                  real-size NLI cross-encoders made there with
#                                  seeded random weights (scripts/bench/cross.py:
#                                  MiniLM-L6's and DeBERTa-v3-base's shapes) on
#                                  CROSS_ROWS (10000) distinct rows, refscore against
#                                  sentence-transformers' CrossEncoder.predict
#                                  (batches CROSS_BATCHES, "32 256"; empty: not run),
#                                  scores compared; the base binary, where packed,
#                                  before each refscore run; with CROSS_NIGHTLY_ROWS,
#                                  nli_equivalence with the MiniLM-shaped model on a
#                                  nightly set of that many rows (rows/s, RSS, GPU);
#                               5. profile (only when STEPS names it): Nsight Compute's
#                                  kernel times over one MiniLM run of PROFILE_ROWS
#                                  (2000) rows in each of PROFILE_PRECISIONS (fp32),
#                                  to $OUT/ncu-minilm-PRECISION.csv;
#                               each record goes to $OUT/gpu-results.jsonl as it is
#                               made (a run cut short keeps what it did), the log to
#                               $OUT/gpu.log, and the table to the output.
#
# Environment: PRECISIONS (speed: the --precision values the new binary runs each
# set in, default fp32; each reduced one's p99 and largest deviation from fp32 on
# every row are recorded), PARITY_PRECISIONS (parity: also run every case on the GPU
# in these precisions and record its deviation from the CPU's fp32; default none),
# ENCODER_DTYPES (python: the bare encoder's types, default fp32,bf16), CROSS_PRECISIONS
# (cross: refscore's --precision values, default fp32), CROSS_DTYPES (cross:
# CrossEncoder.predict's types, default fp32), ROWS (default 20000), BIG_ROWS (default 200000), TOL (default 1e-4),
# SPEED_RUNS (default: minilm and mpnet each on nightly, distinct and nightly-big, as
# "minilm:nightly ..."), PYTHON_RUNS (default "minilm:nightly minilm:distinct
# mpnet:nightly"; empty: none), ENCODER_MODELS (default "minilm mpnet"; empty: none),
# STEPS (run: default "parity speed python cross"), DEVICE (run: default cuda; `cpu` walks
# the same steps on a machine without a GPU, to check the script, with REFSCORE_BIN
# naming a CPU build and REFSCORE_BASE_BIN a CPU base), REFSCORE_CUDA_BIN (pack:
# default target/cuda/release/refscore), OUT. Candle's f32 matrix products on CUDA do
# not use TF32 unless asked; refscore never asks. What a run costs, on an H200: all
# the defaults with ROWS=20000 BIG_ROWS=100000 take over 8 minutes; the second call of
# docs/performance.md#gpu (PARITY=short, four refscore sets twice, two Python runs)
# took 263 s.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
pack_dir="$root/.gpu"
tol="${TOL:-1e-4}"
log() { echo "bench-gpu.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# The small files of a sentence-transformers folder (everything but the weights).
copy_folder() {
  local from=$1 to=$2 f
  mkdir -p "$to"
  for f in "$from"/*; do
    [ -f "$f" ] && [ "$(basename "$f")" != model.safetensors ] && cp "$f" "$to/"
  done
  cp -r "$from/1_Pooling" "$to/"
}

pack() {
  local bin="${REFSCORE_CUDA_BIN:-${CARGO_TARGET_DIR:-$root/target/cuda}/release/refscore}"
  [ -x "$bin" ] || die "no CUDA binary at $bin: run scripts/env/build-cuda.sh first (or set REFSCORE_CUDA_BIN)"
  readelf -d "$bin" | grep -q 'libcuda\.so' || die "$bin is not a CUDA build (it does not link libcuda)"
  scripts/fetch-model.sh >/dev/null
  scripts/fetch-model.sh --model all-mpnet-base-v2 >/dev/null
  rm -rf "$pack_dir"
  mkdir -p "$pack_dir/wheels"
  local py="${PYTHON:-$HOME/.cache/refscore/venv-test/bin/python}"
  [ -x "$py" ] || py=python3
  # Stripped (symbols only: a third smaller), and with a base build the two in
  # one xz stream whose window holds both, so that the second costs only what
  # differs (two binaries of 113 MB took 40 MB apart, 20 MB together).
  local stripped="$pack_dir/stripped"
  mkdir -p "$stripped"
  strip -o "$stripped/refscore" "$bin"
  if [ -n "${REFSCORE_CUDA_BASE_BIN:-}" ]; then
    readelf -d "$REFSCORE_CUDA_BASE_BIN" | grep -q 'libcuda\.so' || die "$REFSCORE_CUDA_BASE_BIN is not a CUDA build"
    strip -o "$stripped/refscore-base" "$REFSCORE_CUDA_BASE_BIN"
    log "compressing the two binaries together"
    tar -C "$stripped" -cf - refscore refscore-base |
      xz -T1 --lzma2=preset=6,dict=256MiB -c >"$pack_dir/refscore-pair.tar.xz"
  else
    log "compressing the binary"
    xz -T0 -6 -c "$stripped/refscore" >"$pack_dir/refscore.xz"
  fi
  rm -rf "$stripped"
  copy_folder models/all-MiniLM-L6-v2 "$pack_dir/minilm"
  if [ "${MINILM_WEIGHTS:-q8}" = random ]; then
    log "all-MiniLM-L6-v2, the shapes of its weights"
    "$py" scripts/bench/gpu.py skeleton models/all-MiniLM-L6-v2/model.safetensors "$pack_dir/minilm-skeleton.safetensors"
  else
    log "all-MiniLM-L6-v2, matrices as int8 rows"
    "$py" scripts/bench/gpu.py weights models/all-MiniLM-L6-v2/model.safetensors "$pack_dir/minilm-q8.safetensors" q8
    xz -T0 -6 "$pack_dir/minilm-q8.safetensors"
  fi
  log "all-mpnet-base-v2, the shapes of its weights"
  copy_folder models/all-mpnet-base-v2 "$pack_dir/mpnet"
  "$py" scripts/bench/gpu.py skeleton models/all-mpnet-base-v2/model.safetensors "$pack_dir/mpnet-skeleton.safetensors"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$pack_dir/wheels" "$(grep '^bert-score==' scripts/env/parity-requirements.txt)"
  local size tree
  size="$(du -sm "$pack_dir" | cut -f1)"
  tree="$(git ls-files -z | du -cm --files0-from=- | tail -n 1 | cut -f1)"
  [ $((size + tree)) -lt 62 ] || die ".gpu is $size MiB and the repository $tree MiB: a transfer takes 64 MiB (MINILM_WEIGHTS=random carries less)"
  log ".gpu is $size MiB (with the repository's $tree MiB). On the GPU machine: run(command='bash scripts/bench/gpu.sh run', carry=['.gpu'])"
}

run() {
  local device="${DEVICE:-cuda}" out="${OUT:-/tmp/refscore-gpu-out}" work=/tmp/refscore-gpu
  local steps="${STEPS:-parity speed python cross}" rows="${ROWS:-20000}" big="${BIG_ROWS:-200000}"
  [ -d "$pack_dir" ] || die "no .gpu folder: run 'scripts/bench/gpu.sh pack' here first and carry .gpu"
  rm -rf "$work"
  mkdir -p "$work" "$out"
  results="$out/gpu-results.jsonl"
  : >"$results"
  exec 2> >(tee -a "$out/gpu.log" >&2)
  note() { python3 -c 'import json,sys; print(json.dumps({"kind": "note", "text": sys.argv[1]}))' "$*" >>"$results"; log "note: $*"; }

  # The benchmark sets, made while the parity cases run.
  python3 scripts/fixtures/make-bench-sets.py --rows "$rows" "$work/sets" >"$work/sets.log" 2>&1 &
  local sets_pid=$!
  big_pid=""
  case " $steps " in *" speed "*)
    python3 scripts/fixtures/make-bench-sets.py --rows "$big" "$work/big" >"$work/big.log" 2>&1 &
    big_pid=$!
    ;;
  esac

  log "unpacking"
  python3 - "$pack_dir" "$work" <<'EOF'
import lzma, os, shutil, sys, tarfile
src, dst = sys.argv[1], sys.argv[2]
for name in ("refscore.xz", "refscore-base.xz", "minilm-q8.safetensors.xz"):
    if os.path.exists(f"{src}/{name}"):
        with lzma.open(f"{src}/{name}") as i, open(f"{dst}/{name[:-3]}", "wb") as o:
            shutil.copyfileobj(i, o)
if os.path.exists(f"{src}/refscore-pair.tar.xz"):
    with tarfile.open(f"{src}/refscore-pair.tar.xz", "r:xz") as pair:
        for name in ("refscore", "refscore-base"):
            with pair.extractfile(name) as i, open(f"{dst}/{name}", "wb") as o:
                shutil.copyfileobj(i, o)
EOF
  chmod +x "$work/refscore"
  base=""
  [ -f "$work/refscore-base" ] && chmod +x "$work/refscore-base" && base="${REFSCORE_BASE_BIN:-$work/refscore-base}"
  rm -rf "$work/minilm" "$work/mpnet"
  cp -r "$pack_dir/minilm" "$work/minilm"
  cp -r "$pack_dir/mpnet" "$work/mpnet"
  if [ -f "$work/minilm-q8.safetensors" ]; then
    python3 scripts/bench/gpu.py weights "$work/minilm-q8.safetensors" "$work/minilm/model.safetensors" f32
    minilm_weights="MiniLM: its own weights (int8 rows for the transfer)"
  else
    python3 scripts/bench/gpu.py fill "$pack_dir/minilm-skeleton.safetensors" "$work/minilm/model.safetensors"
    minilm_weights="MiniLM: seeded random weights of its shapes"
  fi
  python3 scripts/bench/gpu.py fill "$pack_dir/mpnet-skeleton.safetensors" "$work/mpnet/model.safetensors"
  python3 -m pip install --quiet --no-index --no-deps --target "$work/site" "$pack_dir"/wheels/*.whl
  export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
  # The CUDA 13 libraries refscore links (cuBLAS, cuRAND, NVRTC, the runtime) come with PyTorch.
  local cu_lib
  cu_lib="$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))' 2>/dev/null || true)"
  [ -n "$cu_lib" ] && export LD_LIBRARY_PATH="$cu_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  bin="${REFSCORE_BIN:-$work/refscore}"
  local gpu
  gpu="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1 || true)"
  [ "$device" = cuda ] && [ -z "$gpu" ] && die "no NVIDIA GPU visible (nvidia-smi); DEVICE=cpu checks the script without one"
  python3 - "${gpu:-none ($device)}" "$(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' || true)" \
    "$(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" >>"$results" <<'EOF'
import json, sys
print(json.dumps({"kind": "gpu", "gpu": sys.argv[1], "cuda": sys.argv[2], "cpu": sys.argv[3]}))
EOF
  note "$minilm_weights; mpnet: seeded random weights of its shapes"
  case " $steps " in *" parity "*) parity "$device" ;; esac
  wait "$sets_pid" || { cat "$work/sets.log" >&2; die "make-bench-sets.py failed"; }
  case " $steps " in *" speed "*) speed "$device" "$rows" "$big" ;; esac
  case " $steps " in *" python "*) python_engines "$device" ;; esac
  case " $steps " in *" cross "*) cross "$device" ;; esac
  case " $steps " in *" profile "*) profile "$device" ;; esac
  python3 scripts/bench/gpu.py table "$results" | tee "$out/gpu-table.txt"
  if grep -q '"ok": false' "$results"; then die "parity failed: see the table's FAILED lines"; fi
}

# One parity case: the fixture's rows on $device and on the CPU, compared.
# Arguments: case name, fixture JSONL, device, the flags naming metrics and model...
parity_case() {
  local name=$1 fixture=$2 device=$3
  shift 3
  local dir="$work/parity/$name" err
  mkdir -p "$dir"
  python3 scripts/bench/gpu.py fixture "$fixture" "$dir/in.parquet"
  local sides="$device cpu"
  # A reduced precision's case (NAME@PRECISION): the device side alone, held
  # against the fp32 case's CPU result (the CPU has no fp16).
  [ "${DEVIATION:-0}" = 1 ] && sides="$device"
  for d in $sides; do
    if ! "$bin" score "$dir/in.parquet" -o "$dir/$d.parquet" --overwrite --quiet \
      --device "$d" "$@" 2>"$dir/$d.err"; then
      err="$(tail -n 1 "$dir/$d.err" | cut -c1-300)"
      python3 -c 'import json,sys; print(json.dumps({"kind": "parity", "case": sys.argv[1], "ok": False, "error": sys.argv[2]}))' \
        "$name" "--device $d: $err"
      return 0
    fi
  done
  if [ "${DEVIATION:-0}" = 1 ]; then
    python3 scripts/bench/gpu.py deviation "$dir/$device.parquet" "$work/parity/${name%@*}/cpu.parquet" "$name" || true
    return 0
  fi
  python3 scripts/bench/gpu.py compare "$dir/$device.parquet" "$dir/cpu.parquet" "$tol" "$name" || true
}

parity() {
  local device=$1 cases="$work/parity-cases.txt" m name base fixture layer
  log "1. parity: $device against cpu, fp32 (tolerance $tol)"
  : >"$cases"
  local emb="--metrics embedding --model"
  echo "minilm tests/fixtures/parity.jsonl $emb $work/minilm" >>"$cases"
  echo "minilm-idf tests/fixtures/parity.jsonl $emb $work/minilm --idf" >>"$cases"
  echo "minilm-layer3 tests/fixtures/parity.jsonl $emb $work/minilm --layer 3" >>"$cases"
  echo "mpnet-random tests/fixtures/parity-all-mpnet-base-v2.jsonl $emb $work/mpnet" >>"$cases"
  echo "mpnet-random-layer9-idf tests/fixtures/parity-all-mpnet-base-v2.jsonl $emb $work/mpnet --layer 9 --idf" >>"$cases"
  for m in tests/fixtures/models/tiny-*; do
    name="$(basename "$m")"
    case "$name" in tiny-static-* | tiny-cross-* | tiny-token-*) continue ;; esac
    [ "${PARITY:-all}" = short ] && case "$name" in tiny-gte|tiny-roberta) ;; *) continue ;; esac
    # shellcheck disable=SC2254 # PARITY_MATCH is a pattern on purpose
    case "$name" in ${PARITY_MATCH:-*}) ;; *) continue ;; esac
    base="$name"
    [ -f "tests/fixtures/parity-$base.jsonl" ] || base="${name%-*}"
    fixture="tests/fixtures/parity-$base.jsonl"
    [ -f "$fixture" ] || { note "no parity fixture for $name"; continue; }
    layer="$(head -n 1 "$fixture" | python3 -c 'import json,sys; print(json.load(sys.stdin)["header"]["layer"])')"
    echo "$name $fixture $emb $m" >>"$cases"
    echo "$name-layer$layer-idf $fixture $emb $m --layer $layer --idf" >>"$cases"
  done
  parity_cases "$device" "$cases"
  for precision in ${PARITY_PRECISIONS:-}; do
    log "1b. deviation: $device at $precision against cpu fp32"
    sed "s/\$/ --precision $precision/; s/^\([^ ]*\)/\1@$precision/" "$cases" >"$cases.$precision"
    parity_cases "$device" "$cases.$precision" deviation
  done
  # A static model has no GPU path: the flag must be refused, not ignored.
  local code=0
  "$bin" score "$work/parity/minilm/in.parquet" -o "$work/static.parquet" --overwrite --quiet \
    --metrics embedding --model tests/fixtures/models/tiny-static-weights --device "$device" \
    2>"$work/static.err" || code=$?
  note "static model with --device $device: exit $code: $(tail -n 1 "$work/static.err" | cut -c1-200)"
}

# Runs the parity cases of a file, a line each: name, fixture, flags; with a
# third argument `deviation`, each case's device side alone against its fp32
# case's CPU result (see parity_case).
parity_cases() {
  local device=$1
  DEVIATION=0
  [ "${3:-}" = deviation ] && DEVIATION=1
  export -f parity_case log
  export work bin tol device DEVIATION
  # Four cases at a time: each is small, and the CPU side has cores to spare.
  xargs -P 4 -L 1 bash -c 'parity_case "$1" "$2" "$device" "${@:3}"' _ <"$2" >>"$results"
}

# refscore on the benchmark sets, one monitored run each.
speed() {
  local device=$1 rows=$2 big=$3 model set file engine
  log "2. refscore on $device"
  local all="minilm:nightly minilm:distinct minilm:nightly-big mpnet:nightly mpnet:distinct mpnet:nightly-big"
  for set in ${SPEED_RUNS:-$all}; do
    model="${set%:*}"
    set="${set#*:}"
    case "$set" in
      nightly-big)
        file="$work/big/nightly.parquet"
        [ -z "$big_pid" ] || wait "$big_pid" || { cat "$work/big.log" >&2; die "make-bench-sets.py failed"; }
        big_pid=""
        ;;
      *) file="$work/sets/$set.parquet" ;;
    esac
    for engine in ${base:+base} $(for p in ${PRECISIONS:-fp32}; do echo "new:$p"; done); do
      local exe="$bin" precision="${engine#new:}" name="new"
      [ "$precision" = fp32 ] || name="new-$precision"
      [ "$engine" = base ] && exe="$base" precision=fp32 name=base
      local label="refscore $precision"
      [ "$engine" = base ] && label="refscore fp32 (base)"
      log "$label $model $set"
      python3 scripts/bench/gpu.py monitor "$work/monitor.json" -- \
        "$exe" score "$file" -o "$work/$model-$set-$name.parquet" --overwrite --quiet \
        --metrics embedding --model "$work/$model" --device "$device" --precision "$precision" || {
        note "$label $model $set on $device failed"
        continue
      }
      python3 scripts/bench/gpu.py record refscore "$work/$model-$set-$name.parquet.summary.json" \
        "$work/monitor.json" "$label" "$model" "$set" >>"$results"
      # A reduced precision's deviation from fp32, on every row of the set.
      if [ "$precision" != fp32 ] && [ -f "$work/$model-$set-new.parquet" ]; then
        python3 scripts/bench/gpu.py deviation "$work/$model-$set-$name.parquet" \
          "$work/$model-$set-new.parquet" "$precision against fp32: $model $set" >>"$results" || true
      fi
    done
    # The change timed must not change a number.
    if [ -n "$base" ] && [ -f "$work/$model-$set-base.parquet" ] && [ -f "$work/$model-$set-new.parquet" ]; then
      python3 scripts/bench/gpu.py compare "$work/$model-$set-new.parquet" "$work/$model-$set-base.parquet" \
        1e-5 "base against new: $model $set" >>"$results" || true
    fi
  done
}

# Cross-encoders: every tiny family's fixture on $device against the CPU, then two
# real-size NLI models (random weights, made there) on CROSS_ROWS rows of the
# distinct set, refscore against sentence-transformers' CrossEncoder on the same GPU.
cross() {
  local device=$1 cases="$work/cross-cases.txt" m name model flags rows="${CROSS_ROWS:-10000}"
  log "4. cross-encoders: parity on $device against cpu, then speed"
  : >"$cases"
  for m in tests/fixtures/models/tiny-cross-*; do
    name="$(basename "$m")"
    # The checker recipes' models are scored through cross-recipes.jsonl's
    # recipes, not a fixture of their own.
    [ -f "tests/fixtures/cross-$name.jsonl" ] || continue
    # MiniCheck's labels are unnamed (LABEL_0, LABEL_1) and HHEM's are
    # (hallucinated, consistent): their entailment is said.
    case "$name" in
      *minicheck*) flags="--metrics nli --nli-labels entailment=1" ;;
      *hhem*) flags="--metrics nli --nli-labels entailment=1" ;;
      *) flags="--metrics cross" ;;
    esac
    echo "$name tests/fixtures/cross-$name.jsonl $flags --cross-model $m" >>"$cases"
  done
  parity_cases "$device" "$cases"
  python3 scripts/bench/cross.py head "$rows" "$work/sets/distinct.parquet" "$work/cross-in.parquet"
  for model in ${CROSS_MODELS-minilm deberta}; do
    if [ "$model" = minilm ]; then m="$work/minilm"; else m=tests/fixtures/models/tiny-cross-deberta-v3-nli; fi
    python3 scripts/bench/cross.py make "$model" "$m" "$work/cross-$model" || { note "cross $model not made"; continue; }
    for engine in ${base:+base} $(for p in ${CROSS_PRECISIONS:-fp32}; do echo "new:$p"; done); do
      local exe="$bin" precision="${engine#new:}" result="$work/cross-$model.parquet"
      [ "$precision" = fp32 ] || result="$work/cross-$model-$precision.parquet"
      [ "$engine" = base ] && exe="$base" precision=fp32 result="$work/cross-$model-base.parquet"
      local label="refscore $precision"
      [ "$engine" = base ] && label="refscore fp32 (base)"
      log "$label cross $model"
      python3 scripts/bench/gpu.py monitor "$work/monitor.json" -- \
        "$exe" score "$work/cross-in.parquet" -o "$result" --overwrite --quiet \
        --metrics nli --cross-model "$work/cross-$model" --device "$device" --precision "$precision" || {
        note "$label cross $model on $device failed"
        continue
      }
      python3 scripts/bench/gpu.py record cross "$result.summary.json" \
        "$work/monitor.json" "$label" "$model" "distinct-$rows" >>"$results"
      if [ "$precision" != fp32 ] && [ -f "$work/cross-$model.parquet" ]; then
        python3 scripts/bench/gpu.py deviation "$result" "$work/cross-$model.parquet" \
          "$precision against fp32: cross $model" >>"$results" || true
      fi
    done
    if [ -n "$base" ] && [ -f "$work/cross-$model-base.parquet" ] && [ -f "$work/cross-$model.parquet" ]; then
      python3 scripts/bench/gpu.py compare "$work/cross-$model.parquet" "$work/cross-$model-base.parquet" \
        1e-5 "base against new: cross $model" >>"$results" || true
    fi
    for batch in ${CROSS_BATCHES-32 256}; do
      for dtype in ${CROSS_DTYPES:-fp32}; do
        local st="$work/cross-$model-st$batch-$dtype"
        log "sentence-transformers CrossEncoder $model, batch $batch, $dtype"
        python3 scripts/bench/gpu.py monitor "$work/monitor.json" -- \
          python3 scripts/bench/cross.py predict "$work/cross-$model" "$work/cross-in.parquet" \
          "$st.parquet" --device "$device" --batch-size "$batch" --dtype "$dtype" >"$st.json" || {
          note "CrossEncoder $model batch $batch $dtype failed"
          continue
        }
        python3 scripts/bench/gpu.py record python "$st.json" "$work/monitor.json" \
          "CrossEncoder.predict $dtype, batch $batch" "$model" "distinct-$rows" >>"$results"
        if [ "$dtype" = fp32 ]; then
          python3 scripts/bench/gpu.py compare "$work/cross-$model.parquet" "$st.parquet" \
            "$tol" "cross $model: refscore against CrossEncoder, batch $batch" >>"$results" || true
        else
          python3 scripts/bench/gpu.py deviation "$st.parquet" "$work/cross-$model.parquet" \
            "CrossEncoder $dtype against refscore fp32: cross $model" >>"$results" || true
        fi
      done
    done
  done
  [ -z "${CROSS_NIGHTLY_ROWS:-}" ] || cross_night "$device" "$CROSS_NIGHTLY_ROWS"
}

# A night of local judging: nli_equivalence (both directions of every pair) with the
# MiniLM-shaped NLI model the cross step made, on the nightly set (20 outputs per
# reference) of CROSS_NIGHTLY_ROWS rows, monitored. Needs the cross step's minilm first.
cross_night() {
  local device=$1 rows=$2
  [ -d "$work/cross-minilm" ] || { note "cross night: the cross step made no MiniLM model"; return 0; }
  python3 scripts/fixtures/make-bench-sets.py --rows "$rows" "$work/cross-night" >"$work/cross-night.log" 2>&1 || {
    cat "$work/cross-night.log" >&2
    die "make-bench-sets.py failed"
  }
  log "refscore fp32 cross minilm, nli_equivalence, $rows nightly rows"
  python3 scripts/bench/gpu.py monitor "$work/monitor.json" -- \
    "$bin" score "$work/cross-night/nightly.parquet" -o "$work/cross-night.parquet" --overwrite --quiet \
    --metrics nli_equivalence --cross-model "$work/cross-minilm" --device "$device" || {
    note "cross night on $device failed"
    return 0
  }
  python3 scripts/bench/gpu.py record cross "$work/cross-night.parquet.summary.json" \
    "$work/monitor.json" "refscore fp32, nli_equivalence" minilm "nightly-$rows" >>"$results"
}

# Nsight Compute over one embedding run of PROFILE_ROWS distinct rows (MiniLM) in each
# of PROFILE_PRECISIONS (default fp32): each kernel's name and time
# (gpu__time_duration.sum, one replay pass), to $OUT/ncu-minilm-PRECISION.csv, beside an
# unprofiled run of the same rows (its forward_seconds): the kernels' sum against the
# forward's wall time says how much of the forward the GPU is idle.
profile() {
  local device=$1 ncu rows="${PROFILE_ROWS:-2000}" precision
  ncu="$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1 || true)"
  [ -n "$ncu" ] || { note "profile: no ncu on this machine"; return 0; }
  python3 scripts/bench/cross.py head "$rows" "$work/sets/distinct.parquet" "$work/profile-in.parquet"
  for precision in ${PROFILE_PRECISIONS:-fp32}; do
    log "5. Nsight Compute, MiniLM, $rows rows, $precision"
    "$bin" score "$work/profile-in.parquet" -o "$work/profile-plain.parquet" --overwrite --quiet \
      --metrics embedding --model "$work/minilm" --device "$device" --precision "$precision" || {
      note "profile: plain run ($precision) failed"
      continue
    }
    python3 scripts/bench/gpu.py record refscore "$work/profile-plain.parquet.summary.json" - \
      "refscore $precision, unprofiled" minilm "distinct-$rows" >>"$results"
    timeout "${PROFILE_SECONDS:-150}" "$ncu" --metrics gpu__time_duration.sum --csv \
      --launch-count "${PROFILE_KERNELS:-4000}" "$bin" score "$work/profile-in.parquet" \
      -o "$work/profile.parquet" --overwrite --quiet --metrics embedding --model "$work/minilm" \
      --device "$device" --precision "$precision" >"$out/ncu-minilm-$precision.csv" 2>"$out/ncu-minilm-$precision.err" ||
      note "profile: ncu exit $? at $precision (see ncu-minilm-$precision.err)"
  done
}

# What a user would otherwise run, on the same GPU and sets.
python_engines() {
  local device=$1 model set
  log "3. sentence-transformers + bert_score and the bare encoder on $device"
  if ! python3 -c 'import torch, sentence_transformers, bert_score' 2>/dev/null; then
    note "sentence-transformers + bert_score not run: torch, sentence_transformers or bert_score is missing"
    return 0
  fi
  for model in ${ENCODER_MODELS-minilm mpnet}; do
    python3 scripts/bench/python.py "$work/sets/distinct.parquet" --encoder-only --model "$work/$model" \
      --device "$device" --threads "$(nproc)" --dtype "${ENCODER_DTYPES:-fp32,bf16}" --encoder-batch-size 32,256 \
      >"$work/$model-encoder.jsonl" || { note "encoder-only $model failed"; continue; }
    python3 scripts/bench/gpu.py record encoder "$work/$model-encoder.jsonl" - - "$model" distinct >>"$results"
  done
  for set in ${PYTHON_RUNS-minilm:nightly minilm:distinct mpnet:nightly}; do
    model="${set%:*}"
    set="${set#*:}"
    log "sentence-transformers + bert_score $model $set"
    python3 scripts/bench/gpu.py monitor "$work/monitor.json" -- \
      python3 scripts/bench/python.py "$work/sets/$set.parquet" "$work/$model-$set-python.parquet" \
      --model "$work/$model" --device "$device" --threads "$(nproc)" >"$work/$model-$set-python.json" || {
      note "sentence-transformers + bert_score $model $set failed"
      continue
    }
    python3 scripts/bench/gpu.py record python "$work/$model-$set-python.json" "$work/monitor.json" \
      "sentence-transformers + bert_score" "$model" "$set" >>"$results"
  done
}

case "${1:-}" in
  pack) pack ;;
  run) run ;;
  *) sed -n '2,65p' "$0"; exit 64 ;;
esac
