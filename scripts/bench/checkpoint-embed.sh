#!/usr/bin/env bash
# Checkpointing's cost on the embedding path: times this build's refscore
# against another build (e.g. one from before checkpoints existed) on the
# same generated set, alternating runs, and prints the median of each and
# their ratio. Needs python3 with pyarrow and the default model.
#
# Usage: scripts/bench/checkpoint-embed.sh BASELINE_BIN [ROWS] [REPEAT]
# ROW_GROUP=N sets the rows per input row group (default 10000).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
baseline="${1:?usage: $0 BASELINE_BIN [ROWS] [REPEAT]}"
rows="${2:-3000}"
repeat="${3:-3}"
new="${REFSCORE_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/refscore}"
python="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$python" - "$work/set.parquet" "$rows" "${ROW_GROUP:-10000}" <<'PY'
import random, sys
import pyarrow as pa, pyarrow.parquet as pq
path, n, group = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(7)
words = ("the capital of France is Paris one hundred painted by Leonardo da Vinci "
         "mitochondria produce ATP in cells answer blue sky forty two river").split()
def sentence(k):
    return " ".join(rng.choice(words) for _ in range(rng.randint(3, k)))
refs = [sentence(12) for _ in range(n // 4)]
pq.write_table(pa.table({
    "reference": [refs[i % len(refs)] for i in range(n)],
    "output": [sentence(20) for _ in range(n)],
}), path, row_group_size=group)
PY
declare -A times
for ((r = 0; r < repeat; r++)); do
  for bin in "$new" "$baseline"; do
    start=$(date +%s.%N)
    "$bin" score "$work/set.parquet" -o "$work/out.parquet" --overwrite -q \
      --metrics embedding --model "$root/models/all-MiniLM-L6-v2" --threads 2
    end=$(date +%s.%N)
    times[$bin]+="$(echo "$end - $start" | bc) "
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
m_new=$(echo "${times[$new]}" | median)
m_base=$(echo "${times[$baseline]}" | median)
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p')"
echo "rows: $rows in row groups of ${ROW_GROUP:-10000}, runs each: $repeat (alternating)"
echo "this build: ${m_new}s  baseline: ${m_base}s  ratio (this/baseline): $(echo "scale=3; $m_new / $m_base" | bc)"
