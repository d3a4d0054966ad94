#!/usr/bin/env bash
# refscore's encoder against the fastest CPU setups the field publishes for the
# same model, side by side in one call on this machine (issue: speed at the
# limit): PyTorch fp32, ONNX Runtime dynamic int8, OpenVINO fp32 and OpenVINO
# static int8 (NNCF, calibrated on locally generated sentences that are not the
# timed ones), and refscore at each precision, all computing the cosine of
# every row of the same nightly-style set with the same number of threads.
# Writes one table ($OUT/anchors.md) and the raw records ($OUT/anchors.jsonl).
#
#   1. a virtualenv outside the repository (~/.cache/refscore/venv-anchors):
#      scripts/env/static-requirements.txt's pinned torch stack (--no-deps, as
#      the test command installs it) plus the anchors' engines, pinned below;
#   2. the nightly set (ROWS rows, 20 outputs per reference) and, with another
#      seed, the calibration set, by scripts/fixtures/make-bench-sets.py;
#   3. the anchors' models, made once per model folder (scripts/bench/anchors.py make);
#   4. REPEAT rounds, each timing every engine once in turn (interleaved, so a
#      slower phase of a shared machine falls on all of them);
#   5. each engine's median rows/s, its ratio to refscore at the same
#      precision class, and its p99 / largest cosine deviation from PyTorch fp32.
#
# refscore's rows/s come from its summary (the whole run: model load, reading,
# tokenising, the forward, writing); the anchors' count only tokenising, the
# forward, pooling and the cosine (no import, no model load): what is compared
# favours the anchors.
#
# Environment: ROWS (default 10000), REPEAT (default 3), THREADS (default 2),
# PRECISIONS (refscore's, default "fp32 bf16 int8"), ENGINES (default "pytorch
# ort-int8 ov-fp32 ov-int8"), BATCH (the anchors' batch size, default 32),
# OUT (default /tmp/refscore-anchors), REFSCORE_BIN, REFSCORE_MODEL_DIR.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
# shellcheck source=../common/measure.sh
. scripts/common/measure.sh
rows="${ROWS:-10000}" repeat="${REPEAT:-3}" threads="${THREADS:-2}" batch="${BATCH:-32}"
out="${OUT:-/tmp/refscore-anchors}"
bin="${REFSCORE_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/refscore}"
model="${REFSCORE_MODEL_DIR:-$root/models/all-MiniLM-L6-v2}"
venv="${REFSCORE_ANCHORS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/refscore/venv-anchors}"
log() { echo "anchors.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# The anchors' engines, pinned (the versions the issue's figures came from).
engines_pins=(openvino==2026.4.1 nncf==3.4.0 onnx==1.23.2 onnxruntime==1.32.0)

[ -x "$bin" ] || die "no refscore binary at $bin (cargo build --release, or set REFSCORE_BIN)"
[ -f "$model/model.safetensors" ] || scripts/fetch-model.sh >/dev/null
mkdir -p "$out"

stamp="$(cat scripts/env/static-requirements.txt; printf '%s\n' "${engines_pins[@]}")"
if [ "$(cat "$venv/.refscore-anchors" 2>/dev/null || true)" != "$stamp" ]; then
  log "making $venv (torch pinned without its CUDA extras, plus ${engines_pins[*]})"
  rm -rf -- "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    -r scripts/env/static-requirements.txt
  # The engines resolve their own needs; torch is already there, so none of its
  # CUDA wheels come back.
  "$venv/bin/pip" install --quiet --disable-pip-version-check --only-binary=:all: "${engines_pins[@]}"
  echo "$stamp" >"$venv/.refscore-anchors"
fi
py="$venv/bin/python"

sets="$out/sets-$rows"
[ -f "$sets/nightly.parquet" ] || "$py" scripts/fixtures/make-bench-sets.py --rows "$rows" "$sets" >/dev/null
[ -f "$out/calibration/nightly.parquet" ] ||
  "$py" scripts/fixtures/make-bench-sets.py --rows 2000 --seed 7 "$out/calibration" >/dev/null
work="$out/models/$(basename "$model")"
if [ ! -f "$work/ov-int8/model.xml" ]; then
  log "making the anchors' models in $work"
  "$py" scripts/bench/anchors.py make "$model" "$work" "$out/calibration/nightly.parquet" \
    --calibration-texts 300
fi

input="$sets/nightly.parquet"
records="$out/anchors.jsonl"
: >"$records"
cpu="$(cpu_line)"
log "$cpu; $rows rows, $threads threads, $repeat rounds"
for round in $(seq 1 "$repeat"); do
  for p in ${PRECISIONS:-fp32 bf16 int8}; do
    "$bin" score "$input" -o "$out/refscore-$p.parquet" --overwrite --quiet --metrics cosine \
      --model "$model" --threads "$threads" --precision "$p"
    "$py" - "$out/refscore-$p.parquet.summary.json" "$p" "$round" >>"$records" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
print(json.dumps({"engine": f"refscore {sys.argv[2]}", "round": int(sys.argv[3]), "rows": s["rows"],
                  "seconds": s["seconds"], "rows_per_second": s["rows_per_second"]}))
EOF
  done
  for e in ${ENGINES:-pytorch ort-int8 ov-fp32 ov-int8}; do
    "$py" scripts/bench/anchors.py run "$e" "$model" "$work" "$input" "$out/$e.parquet" \
      --threads "$threads" --batch-size "$batch" |
      "$py" -c 'import json,sys; r=json.loads(sys.stdin.read()); r["round"]=int(sys.argv[1]); print(json.dumps(r))' \
        "$round" >>"$records"
  done
  log "round $round done"
done

"$py" - "$records" "$out" "$cpu" "$rows" "$threads" "${ENGINES:-pytorch ort-int8 ov-fp32 ov-int8}" \
  "${PRECISIONS:-fp32 bf16 int8}" >"$out/anchors.md" <<'EOF'
import json, statistics, subprocess, sys
records, out, cpu, rows, threads, engines, precisions = sys.argv[1:]
recs = [json.loads(l) for l in open(records) if l.strip()]
names = [f"refscore {p}" for p in precisions.split()] + engines.split()
median = {n: statistics.median(r["rows_per_second"] for r in recs if r["engine"] == n)
          for n in names if any(r["engine"] == n for r in recs)}
files = {**{f"refscore {p}": f"{out}/refscore-{p}.parquet" for p in precisions.split()},
         **{e: f"{out}/{e}.parquet" for e in engines.split()}}
ref = files.get("pytorch")
def dev(name):
    if not ref or name == "pytorch":
        return None
    line = subprocess.run([sys.executable, "scripts/bench/anchors.py", "deviation", files[name], ref, name],
                          capture_output=True, text=True, check=True).stdout
    return json.loads(line)
# Each anchor against refscore in its class: fp32 with fp32, int8 with int8.
peer = {"pytorch": "refscore fp32", "ov-fp32": "refscore fp32", "ort-int8": "refscore int8",
        "ov-int8": "refscore int8"}
print(f"{cpu}; {rows} nightly rows (cosine only), {threads} threads; medians of "
      f"{max(r['round'] for r in recs)} interleaved rounds\n")
print("| engine | rows/s (median) | runs | refscore's peer ÷ this | cosine vs PyTorch fp32: p99 | max |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for n in names:
    if n not in median:
        continue
    runs = " / ".join(f"{r['rows_per_second']:.0f}" for r in recs if r["engine"] == n)
    ratio = f"{median[peer[n]] / median[n]:.2f}×" if n in peer and peer[n] in median else ""
    d = dev(n)
    p99, mx = (f"{d['p99']:.1e}", f"{d['max']:.1e}") if d else ("", "")
    print(f"| {n} | {median[n]:.0f} | {runs} | {ratio} | {p99} | {mx} |")
EOF
cat "$out/anchors.md"
