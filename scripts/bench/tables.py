#!/usr/bin/env python3
"""Makes the data of scripts/bench/tables.sh: ROWS rows of short question and
answer text as (1) a Delta table written by deltalake in FILES files, whose
commit after the first deletes 1% of the rows with deletion vectors stored
beside the data (written as Delta's protocol lays them out, by the helpers of
tests/python/test_delta_tables.py, since deltalake does not write them),
(2) plain Parquet files holding exactly the rows the table still has, in the
same row-group size, and (3) an Iceberg table written by pyiceberg (SQL
catalog) in FILES appends, whose last snapshot deletes the same rows with
position delete files (tests/python/test_iceberg_tables.py's helpers). Delta
and plain files are uploaded to the S3 server at AWS_ENDPOINT_URL when it is
set; the Iceberg table is written there a second time by pyiceberg itself
(its metadata names its files by their URLs). Usage: tables.py OUT ROWS FILES"""

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
from test_iceberg_tables import FILE_PATH_ID, POS_ID, _field, catalog, commit_delete_file  # noqa: E402
from pyiceberg.manifest import DataFileContent  # noqa: E402

GROUP = 65536


def night(start, stop):
    ids = range(start, stop)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "reference": [f"The answer to question {i} is {i * 7 % 1000} units of the thing." for i in ids],
        "output": [f"It is {i * 7 % 1000 + (i % 3 == 0)} units of the thing, for question {i}." for i in ids],
    })


def iceberg_table(cat, rows, files, gone):
    """The same rows as the Delta table, in FILES appends, then `gone`
    (ids) deleted by one position delete file per data file."""
    table = cat.create_table("nightly.bench", schema=night(0, 1).schema,
                             properties={"write.parquet.row-group-limit": str(GROUP)})
    per = rows // files
    for k in range(files):
        table.append(night(k * per, (k + 1) * per if k < files - 1 else rows))
    for task in table.scan().plan_files():
        path = task.file.file_path
        ids = pq.read_table(table.io.new_input(path).open(), columns=["id"]).column("id").to_pylist()
        positions = [p for p, i in enumerate(ids) if i in gone]
        data = pa.table(
            [pa.array([path] * len(positions), pa.string()), pa.array(positions, pa.int64())],
            schema=pa.schema([_field("file_path", pa.string(), FILE_PATH_ID), _field("pos", pa.int64(), POS_ID)]),
        )
        commit_delete_file(table, DataFileContent.POSITION_DELETES, data)
    return cat.load_table("nightly.bench")


def main(out, rows, files):
    delta, plain = out / "delta", out / "plain"
    # The stamp names what is made: data made by an earlier version of this
    # script (without the Iceberg table) is made again.
    stamp = out / f"made-{rows}-{files}-delta-plain-iceberg"
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
        iceberg = out / "iceberg"
        if iceberg.exists():
            import shutil
            shutil.rmtree(iceberg)
        table = iceberg_table(catalog(iceberg), rows, files, gone)
        assert len(table.scan().to_arrow()) == live.num_rows
        (out / "iceberg-location").write_text(table.location().removeprefix("file://"))
        (out / "gone.txt").write_text(" ".join(map(str, sorted(gone))))
        stamp.write_text(f"{live.num_rows} live rows of {rows}\n")
    print(stamp.read_text().strip(), file=sys.stderr)
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        import shutil
        shutil.rmtree(out / "iceberg-s3-catalog", ignore_errors=True)
        import boto3
        s3 = boto3.client("s3", endpoint_url=endpoint)
        s3.create_bucket(Bucket="bench")
        for name in ("delta", "plain"):
            for f in (out / name).rglob("*"):
                if f.is_file():
                    s3.upload_file(str(f), "bench", f"{name}/{f.relative_to(out / name)}")
        gone = set(map(int, (out / "gone.txt").read_text().split()))
        cat = catalog(out / "iceberg-s3-catalog", warehouse="s3://bench/iceberg", **{
            "s3.endpoint": endpoint, "s3.access-key-id": os.environ["AWS_ACCESS_KEY_ID"],
            "s3.secret-access-key": os.environ["AWS_SECRET_ACCESS_KEY"], "s3.region": os.environ["AWS_REGION"]})
        table = iceberg_table(cat, rows, files, gone)
        (out / "iceberg-s3-location").write_text(table.location())


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
