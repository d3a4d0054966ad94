#!/usr/bin/env bash
# Benchmark a static embedding model against the transformer it was distilled
# from, in one run on one machine (docs/performance.md#static-models):
#
#   1. the nightly-style set of ROWS rows (scripts/fixtures/make-bench-sets.py:
#      ROWS/20 references x 20 outputs), and its first SUBSET rows;
#   2. refscore with the static model (--metrics embedding: cosine + BERTScore)
#      over all ROWS rows, and a lexical-only run (exact_match) over the same
#      file: the floor that reading Parquet and writing the result set;
#   3. on the SUBSET rows, side by side: the static model, all-MiniLM-L6-v2 in
#      fp32 and in int8 (the transformer a team runs today);
#   4. model2vec's own Python StaticModel.encode (cosine only) over all ROWS
#      rows, timed inside Python after the Parquet is read;
#   5. prints rows/s, the ratios, peak RSS and where the static run's time went
#      (the summaries' tokenize and lookup seconds), and writes
#      $OUT/static-results.json.
#
# Needs: the static model (scripts/fixtures/make-static-model.sh makes
# models/static-minilm-m2v and its venv), models/all-MiniLM-L6-v2
# (scripts/fetch-model.sh), the test venv's pyarrow (scripts/test.sh makes it)
# and a release build.
#
# Usage:
#   scripts/bench/static.sh
#   ROWS=100000 SUBSET=5000 scripts/bench/static.sh    # a quicker run
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rows="${ROWS:-1000000}"
subset="${SUBSET:-20000}"
out="${OUT:-/tmp/refscore-static-bench}"
bin="${REFSCORE_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/refscore}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/refscore"
py="${REFSCORE_TEST_VENV:-$cache/venv-test}/bin/python"
static_py="$cache/venv-static/bin/python"
static_model="${STATIC_MODEL:-$root/models/static-minilm-m2v}"
minilm="$root/models/all-MiniLM-L6-v2"

for need in "$bin" "$py" "$static_py" "$static_model/model.safetensors" "$minilm/model.safetensors"; do
  [ -e "$need" ] || { echo "static.sh: $need is missing (see the header)" >&2; exit 1; }
done
mkdir -p "$out"
set_dir="$out/sets-$rows"
if [ ! -f "$set_dir/nightly.parquet" ]; then
  echo "== making $rows nightly rows in $set_dir"
  "$py" "$root/scripts/fixtures/make-bench-sets.py" "$set_dir" --rows "$rows" >&2
fi
night="$set_dir/nightly.parquet"
part="$out/nightly-first-$subset.parquet"
"$py" - "$night" "$part" "$subset" <<'EOF'
import sys, pyarrow.parquet as pq
t = pq.read_table(sys.argv[1]).slice(0, int(sys.argv[3]))
pq.write_table(t, sys.argv[2])
EOF

run() { # name input model metrics [flags...]
  local name="$1" input="$2" model="$3" metrics="$4"
  shift 4
  echo "== $name" >&2
  "$bin" score "$input" -o "$out/$name.parquet" --overwrite --quiet \
    --metrics "$metrics" ${model:+--model "$model"} "$@"
}
run static-all "$night" "$static_model" embedding
run lexical-all "$night" "" exact_match
run static-subset "$part" "$static_model" embedding
run minilm-fp32-subset "$part" "$minilm" embedding
run minilm-int8-subset "$part" "$minilm" embedding --precision int8

echo "== model2vec's own encode (Python)" >&2
"$static_py" - "$night" "$static_model" > "$out/model2vec-python.json" <<'EOF'
import json, sys, time
import numpy as np, pyarrow.parquet as pq
from model2vec import StaticModel
t = pq.read_table(sys.argv[1], columns=["reference", "output"])
refs = [x or "" for x in t.column("reference").to_pylist()]
outs = [x or "" for x in t.column("output").to_pylist()]
model = StaticModel.from_pretrained(sys.argv[2])
start = time.perf_counter()
a, b = model.encode(refs), model.encode(outs)
norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
cos = np.where(norms > 0, (a * b).sum(axis=1) / np.maximum(norms, 1e-30), 0.0)
seconds = time.perf_counter() - start
print(json.dumps({"rows": len(refs), "seconds": seconds, "rows_per_second": len(refs) / seconds}))
EOF

"$py" - "$out" "$rows" "$subset" <<'EOF'
import json, os, sys
out, rows, subset = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def summary(name):
    with open(os.path.join(out, name + ".parquet.summary.json")) as f:
        return json.load(f)
runs = {n: summary(n) for n in ["static-all", "lexical-all", "static-subset", "minilm-fp32-subset", "minilm-int8-subset"]}
with open(os.path.join(out, "model2vec-python.json")) as f:
    m2v = json.load(f)
rate = {n: s["rows_per_second"] for n, s in runs.items()}
s = runs["static-all"]
e = s["embedding"]
result = {
    "rows": rows, "subset": subset,
    "rows_per_second": rate,
    "model2vec_python_rows_per_second": m2v["rows_per_second"],
    "static_vs_minilm_fp32": rate["static-subset"] / rate["minilm-fp32-subset"],
    "static_vs_minilm_int8": rate["static-subset"] / rate["minilm-int8-subset"],
    "static_vs_model2vec_python": rate["static-all"] / m2v["rows_per_second"],
    "peak_rss_bytes": {n: r.get("peak_rss_bytes") for n, r in runs.items()},
    "static_all_seconds": {
        "total": s["seconds"], "lexical_only_run": runs["lexical-all"]["seconds"],
        "tokenize": e["tokenize_seconds"], "lookups": e["forward_seconds"],
    },
}
with open(os.path.join(out, "static-results.json"), "w") as f:
    json.dump(result, f, indent=2)
print(f"{'run':<22} {'rows':>9} {'rows/s':>12} {'peak RSS MiB':>13}")
for n, r in runs.items():
    print(f"{n:<22} {r['rows']:>9} {r['rows_per_second']:>12.0f} {(r.get('peak_rss_bytes') or 0) / 2**20:>13.0f}")
print(f"{'model2vec Python':<22} {m2v['rows']:>9} {m2v['rows_per_second']:>12.0f}")
print(f"static / MiniLM fp32 (same {subset} rows): {result['static_vs_minilm_fp32']:.1f}x")
print(f"static / MiniLM int8 (same {subset} rows): {result['static_vs_minilm_int8']:.1f}x")
print(f"static refscore (cosine + BERTScore) / model2vec Python encode (cosine): {result['static_vs_model2vec_python']:.2f}x")
t = result["static_all_seconds"]
print(f"static, all rows: {t['total']:.1f} s in all; a lexical-only run (read + write) {t['lexical_only_run']:.1f} s; tokenizing {t['tokenize']:.1f} s; lookups {t['lookups']:.1f} s")
EOF
