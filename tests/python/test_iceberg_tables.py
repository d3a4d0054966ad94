"""Iceberg tables as input. A table's data/ folder holds the Parquet files of
every snapshot, and the rows later snapshots deleted are named by delete
files beside them, so its files read loose count rows the table no longer
holds. refscore reads the files a snapshot holds, without the rows its
position and equality deletes remove, and must agree row for row with
pyiceberg (`scan().to_arrow()`) at the current and an older snapshot.

The tables are written by pyiceberg with a SQL catalog on sqlite. pyiceberg
writes no delete files (its deletes rewrite data files), so the delete files
here are Parquet files following the spec, committed in a snapshot through
pyiceberg's own manifest writer; pyiceberg reads position deletes back (the
reference), not equality deletes (those rows are computed here, from the
spec: a delete applies to data files of earlier sequence numbers only).

Run through scripts/test.sh; REFSCORE_BIN names the binary.
"""

import json
import os
import shutil
import subprocess
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestContent, ManifestWriterV2
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _FastAppendFiles
from pyiceberg.typedef import Record

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("REFSCORE_BIN", str(ROOT / "target" / "release" / "refscore"))

# The reserved field ids of a position delete file's columns (the spec's).
FILE_PATH_ID, POS_ID = 2147483546, 2147483545


def rows(start, n):
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "reference": [f"answer {i}" for i in ids],
            "output": [f"answer {i}" if i % 2 else f"other {i}" for i in ids],
        }
    )


def catalog(root, **props):
    root.mkdir(parents=True, exist_ok=True)
    cat = SqlCatalog("evals", uri=f"sqlite:///{root}/catalog.db", warehouse=props.pop("warehouse", f"file://{root}"), **props)
    cat.create_namespace("nightly")
    return cat


class _DeleteManifestWriter(ManifestWriterV2):
    """pyiceberg's manifest writer, writing a manifest of delete files."""

    def content(self):
        return ManifestContent.DELETES

    @property
    def _meta(self):
        return {**super()._meta, "content": "deletes"}


class _AddDeleteFiles(_FastAppendFiles):
    """A snapshot that adds delete files (pyiceberg's fast append, its new
    manifest one of deletes)."""

    def new_manifest_writer(self, spec):
        return _DeleteManifestWriter(spec, self.schema(), self.new_manifest_output(), self._snapshot_id, self._compression)


def _field(name, type_, field_id):
    return pa.field(name, type_, nullable=False, metadata={b"PARQUET:field_id": str(field_id).encode()})


def commit_delete_file(table, content, data, equality_ids=None, partition=()):
    """Commits one delete file, of the table's current partition spec."""
    location = f"{table.location()}/data/delete-{uuid.uuid4()}.parquet"
    with table.io.new_output(location).create() as stream:
        pq.write_table(data, stream)
    size = len(table.io.new_input(location))
    delete_file = DataFile.from_args(
        content=content, file_path=location, file_format=FileFormat.PARQUET, partition=Record(*partition),
        record_count=data.num_rows, file_size_in_bytes=size, equality_ids=equality_ids,
    )
    delete_file.spec_id = table.spec().spec_id
    with table.transaction() as tx:
        with _AddDeleteFiles(operation=Operation.DELETE, transaction=tx, io=table.io) as snapshot:
            snapshot.append_data_file(delete_file)


def delete_positions(table, data_file, positions):
    data = pa.table(
        [pa.array([data_file] * len(positions), pa.string()), pa.array(positions, pa.int64())],
        schema=pa.schema([_field("file_path", pa.string(), FILE_PATH_ID), _field("pos", pa.int64(), POS_ID)]),
    )
    commit_delete_file(table, DataFileContent.POSITION_DELETES, data)


def delete_equal_ids(table, ids, partition=()):
    field_id = table.schema().find_field("id").field_id
    data = pa.table([pa.array(ids, pa.int64())], schema=pa.schema([_field("id", pa.int64(), field_id)]))
    commit_delete_file(table, DataFileContent.EQUALITY_DELETES, data, equality_ids=[field_id], partition=partition)


def make_table(cat, name="night"):
    """Snapshots: 30 rows appended, 30 more, then a position delete of 3 rows
    of the first file. Returns the table and each snapshot's id, commit time
    and metadata file."""
    table = cat.create_table(f"nightly.{name}", schema=rows(0, 1).schema)
    states = []
    for start in (0, 30):
        table.append(rows(start, 30))
        states.append(table.metadata_location)
        time.sleep(0.01)
    first = table.scan(snapshot_id=table.metadata.snapshots[0].snapshot_id).plan_files()[0].file.file_path
    delete_positions(table, first, [0, 5, 29])
    table = cat.load_table(f"nightly.{name}")
    states.append(table.metadata_location)
    snaps = [(s.snapshot_id, s.timestamp_ms) for s in table.metadata.snapshots]
    return table, snaps, states


@pytest.fixture(scope="module")
def night(tmp_path_factory):
    root = tmp_path_factory.mktemp("iceberg")
    table, snaps, states = make_table(catalog(root))
    return table, snaps, states


def local(location):
    return location.removeprefix("file://")


def score(spec, out, *extra, env=None):
    return subprocess.run(
        [BIN, "score", spec, "-o", str(out), "--metrics", "exact_match", "--keep", "reference,output", *extra],
        capture_output=True, text=True, env=env, timeout=120,
    )


def result_rows(out):
    t = pq.read_table(out).sort_by("id")
    return t.select(["id", "reference", "output", "exact_match"]).to_pylist()


def expected(t):
    return [
        {**r, "exact_match": r["reference"] == r["output"]}
        for r in t.sort_by("id").select(["id", "reference", "output"]).to_pylist()
    ]


def at_ms(ms):
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def test_the_tables_files_hold_more_rows_than_the_table(night):
    table, _, _ = night
    assert table.scan().to_arrow().num_rows == 57
    files = list(Path(local(table.location()), "data").glob("*.parquet"))
    assert sum(pq.read_metadata(f).num_rows for f in files) > 57


@pytest.mark.parametrize("pick", ["current", "first", "second"])
def test_each_snapshot_reads_as_pyiceberg_reads_it(night, pick, tmp_path):
    table, snaps, _ = night
    which = {"current": None, "first": 0, "second": 1}[pick]
    extra = [] if which is None else ["--table-version", str(snaps[which][0])]
    out = tmp_path / "scores.parquet"
    r = score(local(table.location()), out, *extra)
    assert r.returncode == 0, r.stderr
    snapshot_id = snaps[-1 if which is None else which][0]
    assert result_rows(out) == expected(table.scan(snapshot_id=snapshot_id).to_arrow())
    summary = json.loads((tmp_path / "scores.parquet.summary.json").read_text())
    assert summary["table_version"] == snapshot_id


def test_a_timestamp_reads_the_snapshot_current_then(night, tmp_path):
    table, snaps, _ = night
    out = tmp_path / "scores.parquet"
    # Between the second append and the delete: the second snapshot.
    r = score(local(table.location()), out, "--table-timestamp", at_ms(snaps[1][1]))
    assert r.returncode == 0, r.stderr
    assert result_rows(out) == expected(table.scan(snapshot_id=snaps[1][0]).to_arrow())
    assert len(result_rows(out)) == 60
    r = score(local(table.location()), tmp_path / "early.parquet", "--table-timestamp", "2001-01-01")
    assert r.returncode == 64 and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_metadata_file_reads_its_own_current_snapshot(night, tmp_path):
    table, snaps, states = night
    out = tmp_path / "scores.parquet"
    r = score(local(states[0]), out)
    assert r.returncode == 0, r.stderr
    assert result_rows(out) == expected(table.scan(snapshot_id=snaps[0][0]).to_arrow())


def test_the_version_hint_names_the_current_metadata(tmp_path):
    table, snaps, states = make_table(catalog(tmp_path / "cat"), "hinted")
    metadata = Path(local(table.location())) / "metadata"
    # A Hadoop catalog's hint: the version number of the current metadata.
    number = int(Path(local(states[1])).name.split("-")[0])
    (metadata / "version-hint.text").write_text(f"{number}\n")
    out = tmp_path / "scores.parquet"
    r = score(local(table.location()), out)
    assert r.returncode == 0, r.stderr
    assert result_rows(out) == expected(table.scan(snapshot_id=snaps[1][0]).to_arrow())
    (metadata / "version-hint.text").unlink()
    out = tmp_path / "latest.parquet"
    r = score(local(table.location()), out)
    assert r.returncode == 0, r.stderr
    assert len(result_rows(out)) == 57


def test_equality_deletes_remove_matching_rows_of_earlier_files_only(tmp_path):
    cat = catalog(tmp_path / "cat")
    table = cat.create_table("nightly.eq", schema=rows(0, 1).schema)
    table.append(rows(0, 20))
    delete_equal_ids(table, [3, 4, 15, 99])
    table = cat.load_table("nightly.eq")
    # Id 3 comes back in a later file: the delete does not reach it.
    table.append(rows(3, 1))
    out = tmp_path / "scores.parquet"
    r = score(local(table.location()), out)
    assert r.returncode == 0, r.stderr
    want = [i for i in range(20) if i not in (3, 4, 15)] + [3]
    assert sorted(r["id"] for r in result_rows(out)) == sorted(want)
    summary = json.loads((tmp_path / "scores.parquet.summary.json").read_text())
    assert summary["rows"] == len(want)


def test_an_equality_delete_stays_in_its_partition(tmp_path):
    # The spec: a delete file of a partitioned spec reaches the data files
    # of its own partition value only. Ids repeat across the two nights.
    cat = catalog(tmp_path / "cat")
    data = pa.concat_tables(
        [rows(0, 10).append_column("night", pa.array([n] * 10, pa.string())) for n in ("mon", "tue")]
    )
    table = cat.create_table("nightly.parts", schema=data.schema)
    with table.update_spec() as update:
        update.add_identity("night")
    table.append(data)
    assert len(table.scan().plan_files()) == 2
    delete_equal_ids(table, [2, 7], partition=("mon",))
    table = cat.load_table("nightly.parts")
    out = tmp_path / "scores.parquet"
    r = subprocess.run(
        [BIN, "score", local(table.location()), "-o", str(out), "--metrics", "exact_match", "--keep", "night"],
        capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 0, r.stderr
    got = sorted((row["night"], row["id"]) for row in pq.read_table(out).select(["night", "id"]).to_pylist())
    want = sorted([("mon", i) for i in range(10) if i not in (2, 7)] + [("tue", i) for i in range(10)])
    assert got == want


def test_inspect_shows_the_snapshot_and_schema(night):
    table, snaps, _ = night
    r = subprocess.run([BIN, "inspect", local(table.location())], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"Iceberg snapshot: {snaps[-1][0]}" in r.stdout, r.stdout
    assert "rows: 57" in r.stdout
    for column in ("id", "reference", "output"):
        assert f"  {column} " in r.stdout, r.stdout


def test_shards_and_resume_read_the_snapshot(night, tmp_path):
    table, snaps, _ = night
    spec = local(table.location())
    parts = []
    for k in (1, 2):
        out = tmp_path / f"part{k}.parquet"
        r = score(spec, out, "--shard", f"{k}/2")
        assert r.returncode == 0, r.stderr
        parts += result_rows(out)
    assert sorted(parts, key=lambda r: r["id"]) == expected(table.scan().to_arrow())
    # A finished run of an older snapshot is not taken for the current one.
    out = tmp_path / "scores.parquet"
    assert score(spec, out, "--table-version", str(snaps[0][0])).returncode == 0
    assert score(spec, out, "--resume").returncode == 78
    assert score(spec, out, "--table-version", str(snaps[0][0]), "--resume").returncode == 0


def test_what_refscore_does_not_read_is_refused_in_one_line(night, tmp_path):
    table, _, states = night
    spec = local(table.location())
    out = tmp_path / "scores.parquet"
    # A snapshot the table does not have.
    r = score(spec, out, "--table-version", "12345")
    assert r.returncode == 64 and "12345" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    # A format version refscore does not read.
    meta = json.loads(Path(local(states[-1])).read_text())
    meta["format-version"] = 3
    v3 = tmp_path / "00099-v3.metadata.json"
    v3.write_text(json.dumps(meta))
    r = score(str(v3), out)
    assert r.returncode == 78 and "format version 3" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    # The table's data files read loose.
    r = score(str(Path(spec) / "data" / "*.parquet"), out)
    assert r.returncode == 78 and "Iceberg table" in r.stderr and f"({spec})" in r.stderr, r.stderr
    assert not out.exists()


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server (test_object_store's), stopped with the module."""
    import boto3
    from test_object_store import BUCKET, MOTO, free_port, start_server, stop_server

    port = free_port()
    proc = start_server([str(MOTO), "-H", "127.0.0.1", "-p", str(port)], port)
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="testing",
        aws_secret_access_key="testing-secret", region_name="us-east-1",
    ).create_bucket(Bucket=BUCKET)
    try:
        yield endpoint, BUCKET
    finally:
        stop_server(proc)


def test_a_table_on_the_store_reads_as_pyiceberg_reads_it(s3, tmp_path):
    from test_object_store import store_env

    endpoint, bucket = s3
    cat = catalog(
        tmp_path / "cat", warehouse=f"s3://{bucket}/lake",
        **{"s3.endpoint": endpoint, "s3.access-key-id": "testing",
           "s3.secret-access-key": "testing-secret", "s3.region": "us-east-1"},
    )
    table, snaps, states = make_table(cat)
    env = store_env(endpoint)
    for spec, pick, snapshot_id in [
        (table.location(), [], snaps[-1][0]),
        (table.location() + "/", ["--table-version", str(snaps[0][0])], snaps[0][0]),
        (states[1], [], snaps[1][0]),
    ]:
        out = tmp_path / "scores.parquet"
        r = score(spec, out, *pick, env=env)
        assert r.returncode == 0, (spec, r.stderr)
        assert result_rows(out) == expected(table.scan(snapshot_id=snapshot_id).to_arrow()), spec
        out.unlink()
    r = score(table.location() + "/data/", tmp_path / "x.parquet", env=env)
    assert r.returncode == 78 and "Iceberg table" in r.stderr, r.stderr
