#!/usr/bin/env bash
# What a static model's speed costs in quality (docs/performance.md#static-models):
# the ROC AUC of cosine and BERTScore F1 against the human meaning-match labels
# of tests/fixtures/meaning_match_labelled.jsonl, for the static model and for
# all-MiniLM-L6-v2 (fp32) it was distilled from, computed with scikit-learn's
# roc_auc_score on refscore's own result files.
#
# Needs: models/static-minilm-m2v and its venv (scripts/fixtures/make-static-model.sh),
# models/all-MiniLM-L6-v2 (scripts/fetch-model.sh) and a release build.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${OUT:-/tmp/refscore-static-quality}"
bin="${REFSCORE_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/refscore}"
py="${XDG_CACHE_HOME:-$HOME/.cache}/refscore/venv-static/bin/python"
mkdir -p "$out"
"$py" - "$root/tests/fixtures/meaning_match_labelled.jsonl" "$out/labelled.parquet" <<'EOF'
import json, sys
import pyarrow as pa, pyarrow.parquet as pq
rows = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
pq.write_table(pa.table({k: [r[k] for r in rows] for k in ["id", "reference", "output", "label"]}), sys.argv[2])
EOF
for model in static-minilm-m2v static-minilm-st all-MiniLM-L6-v2; do
  "$bin" score "$out/labelled.parquet" -o "$out/$model.parquet" --overwrite --quiet \
    --metrics cosine,bertscore_f1 --model "$root/models/$model" --keep label
done
"$py" - "$out" <<'EOF'
import sys, os
import pyarrow.parquet as pq
from sklearn.metrics import roc_auc_score
print(f"{'model':<20} {'rows':>5} {'AUC cosine':>11} {'AUC BERTScore F1':>17}")
for model in ["static-minilm-m2v", "static-minilm-st", "all-MiniLM-L6-v2"]:
    t = pq.read_table(os.path.join(sys.argv[1], model + ".parquet")).to_pylist()
    t = [r for r in t if r["cosine"] is not None]
    y = [bool(r["label"]) for r in t]
    auc = lambda m: roc_auc_score(y, [r[m] for r in t])
    print(f"{model:<20} {len(t):>5} {auc('cosine'):>11.3f} {auc('bertscore_f1'):>17.3f}")
EOF
