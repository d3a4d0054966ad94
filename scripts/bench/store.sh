#!/usr/bin/env bash
# Reading a night from an S3-protocol store against the same files on local
# disk, side by side in one run: moto's server (from the test venv) on
# 127.0.0.1, 1M rows of short question/answer text in 8 Parquet files, scored
# with the lexical metrics (so reading is a large share of the run). Runs
# alternate local, store, local, store, ... and each prints its wall time and
# peak RSS (/usr/bin/time), so drift on the machine hits both alike.
#
# Usage: scripts/bench/store.sh
# Environment:
#   ROWS          rows in all (default 1000000)
#   RUNS          pairs of runs (default 3)
#   REFSCORE_BIN  default target/release/refscore (or $CARGO_TARGET_DIR's)
#   PYTHON_TEST   a Python with pyarrow, boto3 and moto[server] (default the
#                 test venv scripts/test.sh makes)
#   OUT           work folder (default /tmp/refscore-store-bench)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
log() { echo "store.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }
bin="${REFSCORE_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/refscore}"
venv="${REFSCORE_TEST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/refscore/venv-test}"
py="${PYTHON_TEST:-$venv/bin/python}"
rows="${ROWS:-1000000}"
runs="${RUNS:-3}"
out="${OUT:-/tmp/refscore-store-bench}"
[ -x "$bin" ] || die "no refscore binary at $bin"
"$py" -c 'import pyarrow, boto3, moto' 2>/dev/null || die "$py lacks pyarrow, boto3 or moto[server]: run scripts/test.sh once or set PYTHON_TEST"
[ -x /usr/bin/time ] || die "/usr/bin/time is missing (Debian package: time)"
mkdir -p "$out/night"
port="$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$(dirname "$py")/moto_server" -H 127.0.0.1 -p "$port" >/dev/null 2>&1 &
moto=$!
trap 'kill $moto 2>/dev/null || true' EXIT
export AWS_ENDPOINT_URL="http://127.0.0.1:$port" AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench AWS_REGION=us-east-1
"$py" - "$out/night" "$rows" <<'PY'
import sys, time, socket, pathlib
import pyarrow as pa, pyarrow.parquet as pq, boto3, os
folder, rows = pathlib.Path(sys.argv[1]), int(sys.argv[2])
files = 8
if len(list(folder.glob("*.parquet"))) != files or sum(pq.read_metadata(f).num_rows for f in folder.glob("*.parquet")) != rows:
    for f in folder.glob("*.parquet"):
        f.unlink()
    per = rows // files
    for k in range(files):
        ids = range(k * per, (k + 1) * per if k < files - 1 else rows)
        t = pa.table({
            "id": list(ids),
            "reference": [f"The answer to question {i} is {i * 7 % 1000} units of the thing." for i in ids],
            "output": [f"It is {i * 7 % 1000 + (i % 3 == 0)} units of the thing, for question {i}." for i in ids],
        })
        pq.write_table(t, folder / f"part-{k}.parquet", row_group_size=65536)
host, port = os.environ["AWS_ENDPOINT_URL"].removeprefix("http://").split(":")
for _ in range(100):
    try:
        socket.create_connection((host, int(port)), timeout=1).close(); break
    except OSError:
        time.sleep(0.2)
s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
s3.create_bucket(Bucket="bench")
for f in sorted(folder.glob("*.parquet")):
    s3.upload_file(str(f), "bench", f"night/{f.name}")
PY
log "$(lscpu | grep -m1 'Model name' | cut -d: -f2 | xargs), family $(lscpu | grep -m1 'CPU family' | cut -d: -f2 | xargs) model $(lscpu | grep -m1 '^Model:' | cut -d: -f2 | xargs), $(nproc) CPUs; $rows rows"
one() { # $1 label, $2 input
  /usr/bin/time -f "%e %M" -o "$out/time" "$bin" score "$2" -o "$out/result.parquet" --overwrite \
    --metrics lexical --quiet >/dev/null 2>"$out/err" || { cat "$out/err" >&2; die "$1 run failed"; }
  read -r wall kib <"$out/time"
  printf '%-6s %8.2f s %8d MiB\n' "$1" "$wall" "$((kib / 1024))"
}
for _ in $(seq "$runs"); do
  one local "$out/night"
  one store "s3://bench/night/"
done
