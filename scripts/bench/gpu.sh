#!/usr/bin/env bash
# The GPU check and benchmark in one command, for a machine with an NVIDIA GPU
# and no Rust, no registry and no model hub (the device machines: CUDA 13 driver,
# PyTorch with sentence-transformers, pandas and pyarrow).
#
#   scripts/bench/gpu.sh pack   here: puts everything the GPU machine needs into
#                               .gpu/ (git-ignored, so `run` can carry it): the
#                               CUDA binary (scripts/env/build-cuda.sh) xz-compressed,
#                               the model with its weights as f16 (to fit one
#                               64 MiB transfer; widened back to f32 there, so every
#                               engine reads the same weights), the parity fixture,
#                               the benchmark sets and the bert-score wheel
#   scripts/bench/gpu.sh run    there, from the repository root with .gpu/ carried:
#                               1. parity: the GPU's cosine and BERTScore against the
#                                  same binary's CPU fp32 on the committed fixture,
#                                  at most TOL (1e-4) apart, else exit 1;
#                               2. refscore --device cuda on the nightly set (20
#                                  outputs per reference) and the all-distinct set,
#                                  fp32: rows/s end to end, encoder tokens/s (bf16 on
#                                  the GPU does not exist yet: --precision is CPU-only);
#                               3. sentence-transformers + bert_score (as a user runs
#                                  them) on the same GPU and sets, and the bare PyTorch
#                                  encoder's tokens/s;
#                               then one table, and $OUT/bench-gpu.json.
#
# Environment: ROWS (rows per set, default 20000), TOL (default 1e-4), DEVICE (run:
# default cuda; `cpu` walks the same steps on a machine without a GPU, to check the
# script, with REFSCORE_BIN naming a CPU build), REFSCORE_CUDA_BIN (pack: default
# target/cuda/release/refscore), OUT.
# Candle's f32 matrix products on CUDA do not use TF32 unless asked; refscore never asks.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
pack_dir="$root/.gpu"
rows="${ROWS:-20000}" # pack only
tol="${TOL:-1e-4}"
log() { echo "bench-gpu.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

pack() {
  local bin="${REFSCORE_CUDA_BIN:-${CARGO_TARGET_DIR:-$root/target/cuda}/release/refscore}"
  [ -x "$bin" ] || die "no CUDA binary at $bin: run scripts/env/build-cuda.sh first (or set REFSCORE_CUDA_BIN)"
  readelf -d "$bin" | grep -q 'libcuda\.so' || die "$bin is not a CUDA build (it does not link libcuda)"
  scripts/fetch-model.sh >/dev/null
  rm -rf "$pack_dir"
  mkdir -p "$pack_dir/model" "$pack_dir/wheels"
  local py="${PYTHON:-$HOME/.cache/refscore/venv-test/bin/python}"
  [ -x "$py" ] || py=python3
  log "compressing the binary"
  xz -T0 -6 -c "$bin" >"$pack_dir/refscore.xz"
  log "the model, weights as f16"
  local model=models/all-MiniLM-L6-v2 f
  for f in "$model"/*; do
    [ -f "$f" ] && [ "$(basename "$f")" != model.safetensors ] && cp "$f" "$pack_dir/model/"
  done
  cp -r "$model/1_Pooling" "$pack_dir/model/"
  "$py" scripts/bench/gpu.py weights "$model/model.safetensors" "$pack_dir/model-f16.safetensors" f16
  xz -T0 -6 "$pack_dir/model-f16.safetensors"
  log "the parity fixture and the benchmark sets ($rows rows each)"
  "$py" scripts/bench/gpu.py fixture tests/fixtures/parity.jsonl "$pack_dir/parity.parquet"
  "$py" scripts/fixtures/make-bench-sets.py --rows "$rows" "$pack_dir" >&2
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$pack_dir/wheels" "$(grep '^bert-score==' scripts/env/parity-requirements.txt)"
  local size
  size="$(du -sm "$pack_dir" | cut -f1)"
  [ "$size" -lt 60 ] || die ".gpu is $size MiB; a transfer takes 64 MiB with the repository"
  log ".gpu is $size MiB. On the GPU machine: run(command='bash scripts/bench/gpu.sh run', carry=['.gpu'])"
}

run() {
  local device="${DEVICE:-cuda}" out="${OUT:-/tmp/refscore-gpu-out}" work=/tmp/refscore-gpu
  [ -d "$pack_dir" ] || die "no .gpu folder: run 'scripts/bench/gpu.sh pack' here first and carry .gpu"
  mkdir -p "$work" "$out"
  python3 - "$pack_dir" "$work" <<'EOF'
import lzma, shutil, sys
src, dst = sys.argv[1], sys.argv[2]
with lzma.open(f"{src}/refscore.xz") as i, open(f"{dst}/refscore", "wb") as o:
    shutil.copyfileobj(i, o)
with lzma.open(f"{src}/model-f16.safetensors.xz") as i, open(f"{dst}/model-f16.safetensors", "wb") as o:
    shutil.copyfileobj(i, o)
EOF
  chmod +x "$work/refscore"
  rm -rf "$work/model" && cp -r "$pack_dir/model" "$work/model"
  python3 scripts/bench/gpu.py weights "$work/model-f16.safetensors" "$work/model/model.safetensors" f32
  python3 -m pip install --quiet --no-index --no-deps --target "$work/site" "$pack_dir"/wheels/*.whl
  export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
  # The CUDA 13 libraries refscore links (cuBLAS, cuRAND, the runtime) come with PyTorch.
  local cu_lib
  cu_lib="$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))' 2>/dev/null || true)"
  [ -n "$cu_lib" ] && export LD_LIBRARY_PATH="$cu_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local bin="${REFSCORE_BIN:-$work/refscore}" model="$work/model" gpu
  gpu="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1 || true)"
  [ "$device" = cuda ] && [ -z "$gpu" ] && die "no NVIDIA GPU visible (nvidia-smi); DEVICE=cpu checks the script without one"
  local runs="$work/runs.jsonl"
  : >"$runs"

  log "1. parity: $device against cpu, fp32, on the fixture (tolerance $tol)"
  "$bin" score "$pack_dir/parity.parquet" -o "$work/parity-gpu.parquet" --overwrite --quiet \
    --metrics embedding --model "$model" --device "$device"
  "$bin" score "$pack_dir/parity.parquet" -o "$work/parity-cpu.parquet" --overwrite --quiet \
    --metrics embedding --model "$model" --device cpu
  local parity_ok=0
  python3 scripts/bench/gpu.py compare "$work/parity-gpu.parquet" "$work/parity-cpu.parquet" "$tol" \
    >"$work/parity.json" || parity_ok=1

  log "2. refscore on $device"
  local set precision
  for set in nightly distinct; do
    for precision in fp32; do
      "$bin" score "$pack_dir/$set.parquet" -o "$work/$set-$precision.parquet" --overwrite --quiet \
        --metrics embedding --model "$model" --device "$device" --precision "$precision"
      python3 - "$work/$set-$precision.parquet.summary.json" "$set" "refscore $precision" >>"$runs" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
print(json.dumps({"engine": sys.argv[3], "set": sys.argv[2], "rows_per_second": s["rows_per_second"],
                  "tokens_per_second": s["embedding"]["tokens_per_second"]}))
EOF
    done
  done

  log "3. sentence-transformers + bert_score on $device"
  local notes=("bf16 on the GPU not run: refscore's --precision bf16 runs on the CPU only")
  if python3 -c 'import torch, sentence_transformers, bert_score' 2>/dev/null; then
    for set in nightly distinct; do
      python3 scripts/bench/python.py "$pack_dir/$set.parquet" "$work/$set-python.parquet" \
        --model "$model" --device "$device" --threads "$(nproc)" >"$work/$set-python.json"
      python3 scripts/bench/python.py "$pack_dir/$set.parquet" --encoder-only \
        --model "$model" --device "$device" --threads "$(nproc)" >"$work/$set-encoder.json"
      python3 - "$work/$set-python.json" "$work/$set-encoder.json" "$set" >>"$runs" <<'EOF'
import json, sys
a, e = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
print(json.dumps({"engine": "sentence-transformers + bert_score", "set": sys.argv[3],
                  "rows_per_second": a["rows_per_second"], "tokens_per_second": None}))
print(json.dumps({"engine": "PyTorch encoder (batches of 32)", "set": sys.argv[3],
                  "rows_per_second": None, "tokens_per_second": e["tokens_per_second"]}))
EOF
    done
  else
    notes+=("sentence-transformers + bert_score not run: torch, sentence_transformers or bert_score is missing here")
  fi

  python3 - "$work/parity.json" "$runs" "$out/bench-gpu.json" "${gpu:-none ($device)}" "$pack_dir/nightly.parquet" "${notes[@]}" <<'EOF'
import json, sys
import pyarrow.parquet as pq
parity, runs, out, gpu, sets = sys.argv[1:6]
result = {"gpu": gpu, "rows": pq.read_metadata(sets).num_rows, "parity": json.load(open(parity)),
          "runs": [json.loads(l) for l in open(runs) if l.strip()], "notes": sys.argv[6:]}
json.dump(result, open(out, "w"), indent=1)
EOF
  python3 scripts/bench/gpu.py table "$out/bench-gpu.json"
  [ "$parity_ok" = 0 ] || die "parity failed: see the table's parity line"
}

case "${1:-}" in
  pack) pack ;;
  run) run ;;
  *) sed -n '2,27p' "$0"; exit 64 ;;
esac
