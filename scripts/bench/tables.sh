#!/usr/bin/env bash
# Reading a Delta table with deletion vectors, and an Iceberg table with
# position deletes, against plain Parquet files of the same live rows, side by
# side in one run (issue 68: within 10%), on local disk and on an S3-protocol
# store (moto's server on 127.0.0.1): ROWS rows of short question/answer text
# in FILES files, 1% deleted by vectors stored beside the data or by position
# delete files (scripts/bench/tables.py makes all three), scored with the
# lexical metrics so that reading is a large share of the run. Each pair is
# timed by farm-bench as whole processes, table and files in turn (A B A B),
# the ratio taken pair by pair; quote the medians.
#
# Usage: scripts/bench/tables.sh
# Environment:
#   ROWS          rows in all (default 1000000)
#   FILES         data files (default 8)
#   RUNS          pairs per place and table kind (default 5)
#   TABLES        table kinds to compare (default "delta iceberg")
#   REFSCORE_BIN  default target/release/refscore (or $CARGO_TARGET_DIR's)
#   PYTHON_TEST   a Python with deltalake, pyarrow, boto3 and moto[server]
#                 (default the test venv scripts/test.sh makes)
#   OUT           work folder (default /tmp/refscore-tables-bench)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
log() { echo "tables.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }
bin="${REFSCORE_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/refscore}"
venv="${REFSCORE_TEST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/refscore/venv-test}"
py="${PYTHON_TEST:-$venv/bin/python}"
rows="${ROWS:-1000000}" files="${FILES:-8}" runs="${RUNS:-5}" tables="${TABLES:-delta iceberg}"
out="${OUT:-/tmp/refscore-tables-bench}"
[ -x "$bin" ] || die "no refscore binary at $bin"
"$py" -c 'import deltalake, pyarrow, boto3, moto, pyiceberg' 2>/dev/null || die "$py lacks deltalake, pyarrow, boto3, moto[server] or pyiceberg: run scripts/test.sh once or set PYTHON_TEST"
command -v farm-bench >/dev/null || die "farm-bench is missing"
mkdir -p "$out"
port="$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$(dirname "$py")/moto_server" -H 127.0.0.1 -p "$port" >/dev/null 2>&1 &
moto=$!
trap 'kill $moto 2>/dev/null || true' EXIT
export AWS_ENDPOINT_URL="http://127.0.0.1:$port" AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench AWS_REGION=us-east-1 AWS_ALLOW_HTTP=true
for _ in $(seq 100); do "$py" -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null && break; sleep 0.2; done
"$py" scripts/bench/tables.py "$out" "$rows" "$files"
log "$(lscpu | grep -m1 'Model name' | cut -d: -f2 | xargs), family $(lscpu | grep -m1 'CPU family' | cut -d: -f2 | xargs) model $(lscpu | grep -m1 '^Model:' | cut -d: -f2 | xargs), $(nproc) CPUs; $rows rows, $files files"
score() { echo "$bin score $1 -o $out/$2.parquet --overwrite --metrics lexical --quiet"; }
for place in local store; do
  for kind in $tables; do
    case "$kind/$place" in
      delta/local) table="$out/delta" ;;
      delta/store) table="s3://bench/delta" ;;
      iceberg/local) table="$(cat "$out/iceberg-location")" ;;
      iceberg/store) table="$(cat "$out/iceberg-s3-location")" ;;
      *) die "unknown table kind $kind (TABLES: delta, iceberg)" ;;
    esac
    if [ "$place" = local ]; then files_at="$out/plain"; else files_at="s3://bench/plain/"; fi
    # Both read the same rows: the table's live rows are the files' rows.
    $(score "$table" check-table) && $(score "$files_at" check-files)
    "$py" - "$out" <<'PY'
import sys, pyarrow.parquet as pq
a, b = (pq.read_table(f"{sys.argv[1]}/{n}.parquet").sort_by("id") for n in ("check-table", "check-files"))
assert a.num_rows == b.num_rows and a.equals(b), "the table's rows differ from the files' rows"
print(f"{a.num_rows} rows, equal", file=sys.stderr)
PY
    echo "== $place: A = $kind table (deletes applied), B = plain Parquet files"
    # shellcheck disable=SC2046
    farm-bench -n "$runs" --timeout 3000 --vs "$(score "$files_at" files)" -- $(score "$table" table)
  done
done
