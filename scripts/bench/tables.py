#!/usr/bin/env python3
"""Makes the data of scripts/bench/tables.sh: ROWS rows of short question and
answer text as (1) a Delta table written by deltalake in FILES files, whose
commit after the first deletes 1% of the rows with deletion vectors stored
beside the data (written as Delta's protocol lays them out, by the helpers of
tests/python/test_delta_tables.py, since deltalake does not write them), and
(2) plain Parquet files holding exactly the rows the table still has, in the
same row-group size. Both are uploaded to the S3 server at AWS_ENDPOINT_URL
when it is set. Usage: tables.py OUT ROWS FILES"""

import os
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "python"))
from deltalake import DeltaTable, WriterProperties, write_deltalake  # noqa: E402
from test_delta_tables import delete_rows, live_adds  # noqa: E402

GROUP = 65536


def night(start, stop):
    ids = range(start, stop)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "reference": [f"The answer to question {i} is {i * 7 % 1000} units of the thing." for i in ids],
        "output": [f"It is {i * 7 % 1000 + (i % 3 == 0)} units of the thing, for question {i}." for i in ids],
    })


def main(out, rows, files):
    delta, plain = out / "delta", out / "plain"
    stamp = out / f"made-{rows}-{files}"
    if not stamp.exists():
        for folder in (delta, plain):
            if folder.exists():
                import shutil
                shutil.rmtree(folder)
        plain.mkdir(parents=True)
        per = rows // files
        props = WriterProperties(max_row_group_size=GROUP)
        for k in range(files):
            part = night(k * per, (k + 1) * per if k < files - 1 else rows)
            write_deltalake(str(delta), part, mode="append" if k else "error", writer_properties=props)
        # Version `files`: 1% of each file's rows deleted (every 100th).
        deletes = {path: list(range(0, pq.read_metadata(delta / path).num_rows, 100))
                   for path in live_adds(delta, files - 1)}
        delete_rows(delta, files, deletes, stored=True)
        gone = set()
        for path, positions in deletes.items():
            ids = pq.read_table(delta / path, columns=["id"]).column("id").to_pylist()
            gone.update(ids[p] for p in positions)
        live = DeltaTable(str(delta), version=files - 1).to_pyarrow_table().sort_by("id")
        live = live.filter(pc.invert(pc.is_in(live["id"], pa.array(sorted(gone), pa.int64()))))
        per = live.num_rows // files
        for k in range(files):
            part = live.slice(k * per, per if k < files - 1 else live.num_rows - k * per)
            pq.write_table(part, plain / f"part-{k}.parquet", row_group_size=GROUP)
        stamp.write_text(f"{live.num_rows} live rows of {rows}\n")
    print(stamp.read_text().strip(), file=sys.stderr)
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        import boto3
        s3 = boto3.client("s3", endpoint_url=endpoint)
        s3.create_bucket(Bucket="bench")
        for name in ("delta", "plain"):
            for f in (out / name).rglob("*"):
                if f.is_file():
                    s3.upload_file(str(f), "bench", f"{name}/{f.relative_to(out / name)}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
