"""Delta Lake tables as input. A table's folder holds the Parquet files of
every version: files that later versions removed stay until a vacuum, so
reading the folder's files loose counted 210 rows for a table of 60. refscore
reads the files a version holds, as delta-rs's kernel replays the log, and
must agree row for row with the `deltalake` package (delta-rs) at every
version; a glob over the table's files, or a folder holding the table, is
still refused.

Run through scripts/test.sh; REFSCORE_BIN names the binary.
"""

import json
import os
import struct
import subprocess
import uuid
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, QueryBuilder, WriterProperties, write_deltalake

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("REFSCORE_BIN", str(ROOT / "target" / "release" / "refscore"))


def rows(start, n):
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": ids,
            "reference": [f"answer {i}" for i in ids],
            "output": [f"answer {i}" if i % 2 else f"other {i}" for i in ids],
            "day": [f"2026-11-{20 + i % 3:02d}" for i in ids],
        }
    )


def make_table(path, **kwargs):
    """Versions 0-3: write 50 rows, append 50, delete 40, overwrite with 60."""
    write_deltalake(path, rows(0, 50), **kwargs)
    write_deltalake(path, rows(50, 50), mode="append", **kwargs)
    storage = kwargs.get("storage_options")
    DeltaTable(path, storage_options=storage).delete("id >= 60 and id < 100")
    write_deltalake(path, rows(1000, 60), mode="overwrite", **kwargs)


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    path = tmp_path_factory.mktemp("delta") / "night"
    make_table(str(path))
    return path


@pytest.fixture(scope="module")
def partitioned(tmp_path_factory):
    path = tmp_path_factory.mktemp("delta") / "by_day"
    make_table(str(path), partition_by=["day"])
    return path


def score(spec, out, *extra, env=None):
    return subprocess.run(
        [BIN, "score", spec, "-o", str(out), "--metrics", "exact_match",
         "--keep", "reference,output,day", *extra],
        capture_output=True,
        text=True,
        env=env,
    )


def result_rows(out):
    t = pq.read_table(out).sort_by("id")
    return t.select(["id", "reference", "output", "day", "exact_match"]).to_pylist()


def expected_rows(dt):
    t = dt.to_pyarrow_table().sort_by("id")
    return [
        {**r, "exact_match": r["reference"] == r["output"]}
        for r in t.select(["id", "reference", "output", "day"]).to_pylist()
    ]


def test_the_table_holds_60_rows_in_files_of_more(table):
    # The premise: deltalake reads 60 live rows, the folder's files hold more.
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == 60
    files = list(table.glob("*.parquet"))
    loose = sum(pq.read_metadata(f).num_rows for f in files)
    assert loose > 60


@pytest.mark.parametrize("which", ["table", "partitioned"])
@pytest.mark.parametrize("version", [None, 0, 1, 2, 3])
def test_every_version_reads_as_deltalake_reads_it(request, which, version, tmp_path):
    path = request.getfixturevalue(which)
    out = tmp_path / "scores.parquet"
    extra = [] if version is None else ["--table-version", str(version)]
    r = score(str(path), out, *extra)
    assert r.returncode == 0, r.stderr
    dt = DeltaTable(str(path), version=version)
    assert result_rows(out) == expected_rows(dt)
    summary = json.loads((tmp_path / "scores.parquet.summary.json").read_text())
    assert summary["table_version"] == dt.version()
    assert summary["rows"] == len(expected_rows(dt))


def test_a_version_the_table_does_not_have_is_refused(table, tmp_path):
    out = tmp_path / "scores.parquet"
    r = score(str(table), out, "--table-version", "9")
    assert r.returncode == 64, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert str(table) in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_table_version_on_plain_files_is_refused(tmp_path):
    src = tmp_path / "plain.parquet"
    pq.write_table(rows(0, 3), src)
    r = score(str(src), tmp_path / "out.parquet", "--table-version", "1")
    assert r.returncode == 78 and "not one" in r.stderr, r.stderr


def test_inspect_names_the_version_and_partition_column(partitioned):
    r = subprocess.run([BIN, "inspect", str(partitioned)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "Delta table version: 3" in r.stdout
    assert "rows: 60" in r.stdout
    assert "day" in r.stdout


def test_a_new_version_is_a_changed_input_for_resume(table, tmp_path):
    # A finished run of version 2 is not taken for one of version 3.
    out = tmp_path / "scores.parquet"
    assert score(str(table), out, "--table-version", "2").returncode == 0
    r = score(str(table), out, "--resume")
    assert r.returncode == 78, r.stderr


@pytest.mark.parametrize("how", ["glob", "parent", "partition"])
def test_a_tables_files_are_never_read_loose(table, partitioned, tmp_path, how):
    spec = {
        "glob": str(table / "*.parquet"),
        "parent": str(table.parent),
        "partition": str(next(partitioned.glob("day=*"))),
    }[how]
    out = tmp_path / "scores.parquet"
    r = score(spec, out)
    assert r.returncode == 78, r.stderr
    assert "Delta Lake table" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert list(tmp_path.iterdir()) == []
    r = subprocess.run([BIN, "inspect", spec], capture_output=True, text=True)
    assert r.returncode == 78 and "Delta Lake table" in r.stderr, r.stderr


def test_table_timestamp_reads_the_version_current_then(table, tmp_path):
    import shutil
    from datetime import datetime, timezone

    copy = tmp_path / "night"
    shutil.copytree(table, copy)
    # Without in-commit timestamps a commit's time is its log file's: set
    # them a month apart (version v: the first of month v + 1, 2026).
    for v in range(4):
        at = datetime(2026, v + 1, 1, tzinfo=timezone.utc).timestamp()
        os.utime(copy / "_delta_log" / f"{v:020d}.json", (at, at))
    for when, version in [("2026-01-15", 0), ("2026-03-01T00:00:00Z", 2), ("2026-03-31T23:59:59Z", 2),
                          ("2027-01-01", 3)]:
        out = tmp_path / f"{version}-{when[:10]}.parquet"
        r = score(str(copy), out, "--table-timestamp", when)
        assert r.returncode == 0, (when, r.stderr)
        assert result_rows(out) == expected_rows(DeltaTable(str(copy), version=version)), when
    r = score(str(copy), tmp_path / "early.parquet", "--table-timestamp", "2025-12-31")
    assert r.returncode == 64 and "no version" in r.stderr, r.stderr
    r = score(str(copy), tmp_path / "both.parquet", "--table-timestamp", "2026-01-15", "--table-version", "1")
    assert r.returncode == 64, r.stderr


# Deletion vectors. deltalake (delta-rs 1.6) neither writes them nor reads a
# table that has them, so the commit that adds one is written here as Delta's
# protocol lays it out (PROTOCOL.md, "Deletion Vectors"), and the rows
# expected are deltalake's rows of the version before it less the rows the
# vector names, found by reading the data file itself.

Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def z85(data):
    data = data + b"\0" * (-len(data) % 4)
    out = []
    for i in range(0, len(data), 4):
        n = int.from_bytes(data[i:i + 4], "big")
        out.append("".join(Z85[(n // 85 ** k) % 85] for k in range(4, -1, -1)))
    return "".join(out)


def roaring(rows):
    """Delta's RoaringBitmapArray (portable, one 32-bit bitmap of array
    containers) of row indexes below 2**32, after its magic number."""
    rows = sorted(set(rows))
    keys = sorted({r >> 16 for r in rows})
    groups = [[r & 0xFFFF for r in rows if r >> 16 == k] for k in keys]
    body = struct.pack("<ii", 12346, len(keys))
    body += b"".join(struct.pack("<HH", k, len(g) - 1) for k, g in zip(keys, groups))
    offset = len(body) + 4 * len(keys)
    for g in groups:
        body += struct.pack("<i", offset)
        offset += 2 * len(g)
    body += b"".join(struct.pack(f"<{len(g)}H", *g) for g in groups)
    return struct.pack("<iqi", 1681511377, 1, 0) + body


def deletion_vector(table, rows, stored):
    """The descriptor of a vector deleting `rows`: inline in the log, or in
    a file beside the data (storage type u: a prefix folder and the file's
    UUID, Z85-encoded)."""
    data = roaring(rows)
    if not stored:
        return {"storageType": "i", "pathOrInlineDv": z85(data), "offset": None,
                "sizeInBytes": len(data), "cardinality": len(set(rows))}
    name = uuid.uuid4()
    (table / "dv").mkdir(exist_ok=True)
    blob = b"\x01" + struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data))
    (table / "dv" / f"deletion_vector_{name}.bin").write_bytes(blob)
    return {"storageType": "u", "pathOrInlineDv": "dv" + z85(name.bytes), "offset": 1,
            "sizeInBytes": len(data), "cardinality": len(set(rows))}


def log(table, version):
    return [json.loads(line) for line in
            (table / "_delta_log" / f"{version:020d}.json").read_text().splitlines()]


def commit(table, version, actions):
    (table / "_delta_log" / f"{version:020d}.json").write_text(
        "".join(json.dumps(a) + "\n" for a in actions))


def live_adds(table, version):
    adds = {}
    for v in range(version + 1):
        for a in log(table, v):
            if "add" in a:
                adds[a["add"]["path"]] = a["add"]
            if "remove" in a:
                adds.pop(a["remove"]["path"], None)
    return adds


DV_PROTOCOL = {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                            "readerFeatures": ["deletionVectors"],
                            "writerFeatures": ["deletionVectors"]}}


def delete_rows(table, version, deletes, stored):
    """Commits `version`: each file of `deletes` (path -> row indexes, all of
    them, earlier deletions included) gets a vector removing those rows."""
    adds = live_adds(table, version - 1)
    at = max(a["modificationTime"] for a in adds.values()) + version
    upgraded = any(DV_PROTOCOL == a for v in range(version) for a in log(table, v))
    actions = [] if upgraded else [DV_PROTOCOL]
    for path, rows in deletes.items():
        old = adds[path]
        actions.append({"remove": {"path": path, "deletionTimestamp": at, "dataChange": True,
                                   **({"deletionVector": old["deletionVector"]}
                                      if "deletionVector" in old else {})}})
        actions.append({"add": {**old, "deletionVector": deletion_vector(table, rows, stored)}})
    actions.append({"commitInfo": {"timestamp": at, "operation": "DELETE"}})
    commit(table, version, actions)


def ids_at(table, path, rows):
    ids = pq.read_table(table / path, columns=["id"]).column("id").to_pylist()
    return {ids[r] for r in rows}


@pytest.mark.parametrize("stored", [False, True], ids=["inline", "file"])
def test_deletion_vectors_remove_their_rows(tmp_path, stored):
    # Versions 0-1: 60 rows in two files of row groups of 16 (deltalake);
    # 2: vectors on both files; 3: the first file's vector grows.
    path = tmp_path / "dv"
    props = WriterProperties(max_row_group_size=16)
    write_deltalake(str(path), rows(0, 40), writer_properties=props)
    write_deltalake(str(path), rows(40, 20), mode="append", writer_properties=props)
    first, second = sorted(live_adds(path, 1), key=lambda p: ids_at(path, p, [0]).pop())
    delete_rows(path, 2, {first: [0, 15, 16, 17, 39], second: [5]}, stored)
    delete_rows(path, 3, {first: [0, 15, 16, 17, 39, 20, 31, 32]}, stored)
    gone = {2: ids_at(path, first, [0, 15, 16, 17, 39]) | ids_at(path, second, [5]),
            3: ids_at(path, first, [0, 15, 16, 17, 39, 20, 31, 32]) | ids_at(path, second, [5])}
    before = expected_rows(DeltaTable(str(path), version=1))
    for version in [None, 1, 2, 3]:
        out = tmp_path / f"v{version}.parquet"
        extra = [] if version is None else ["--table-version", str(version)]
        r = score(str(path), out, *extra, "--batch-size", "8")
        assert r.returncode == 0, r.stderr
        want = [row for row in before if row["id"] not in gone.get(version or 3, set())]
        assert result_rows(out) == want, version
        summary = json.loads(out.with_name(out.name + ".summary.json").read_text())
        assert summary["table_version"] == (version or 3)
    assert len(want) == 60 - 9


def test_a_resumed_run_of_a_table_with_deletion_vectors_reads_each_live_row_once(tmp_path):
    # Shards cut the live rows: two shards of a table with vectors hold
    # every live row exactly once.
    path = tmp_path / "dv"
    write_deltalake(str(path), rows(0, 40), writer_properties=WriterProperties(max_row_group_size=8))
    (only,) = live_adds(path, 0)
    delete_rows(path, 1, {only: [1, 8, 9, 30]}, stored=False)
    got = []
    for shard in ["1/2", "2/2"]:
        out = tmp_path / f"shard{shard[0]}.parquet"
        r = score(str(path), out, "--shard", shard, "--batch-size", "8")
        assert r.returncode == 0, r.stderr
        got += result_rows(out)
    gone = ids_at(path, only, [1, 8, 9, 30])
    want = [row for row in expected_rows(DeltaTable(str(path), version=0)) if row["id"] not in gone]
    assert sorted(got, key=lambda row: row["id"]) == want


# Column mapping: deltalake writes tables in modes name and id, and reads
# them right through its DataFusion reader (QueryBuilder; its pyarrow
# reader gives nulls). It cannot rename a column: the rename is the commit
# Delta's protocol describes (a new schema, the same physical names).


def query_rows(path, version):
    dt = DeltaTable(str(path), version=version)
    t = pa.table(QueryBuilder().register("t", dt).execute("select * from t").read_all())
    return sorted(t.to_pylist(), key=lambda row: row["id"])


def rename(path, version, old, new):
    meta = next(a["metaData"] for v in range(version) for a in log(path, v) if "metaData" in a)
    schema = json.loads(meta["schemaString"])
    for field in schema["fields"]:
        if field["name"] == old:
            field["name"] = new
    commit(path, version, [{"metaData": {**meta, "schemaString": json.dumps(schema)}},
                           {"commitInfo": {"timestamp": meta["createdTime"] + version,
                                           "operation": "RENAME COLUMN"}}])


@pytest.mark.parametrize("mode", ["name", "id"])
def test_column_mapping_reads_columns_by_their_logical_names(tmp_path, mode):
    path = tmp_path / f"mapped_{mode}"
    config = {"delta.columnMapping.mode": mode, "delta.minReaderVersion": "2",
              "delta.minWriterVersion": "5"}
    write_deltalake(str(path), rows(0, 30), partition_by=["day"], configuration=config)
    write_deltalake(str(path), rows(30, 10), mode="append", partition_by=["day"])
    rename(path, 2, "output", "answer")
    # The files name the columns by their physical names only.
    stored = pq.read_schema(next(path.rglob("*.parquet"))).names
    assert "output" not in stored and "reference" not in stored
    for version, output in [(None, "answer"), (1, "output")]:
        out = tmp_path / f"v{version}.parquet"
        extra = [] if version is None else ["--table-version", str(version)]
        r = subprocess.run([BIN, "score", str(path), "-o", str(out), "--metrics", "exact_match",
                            "--output-col", output, "--keep", f"reference,{output},day", *extra],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        want = query_rows(path, version)
        assert len(want) == 40
        got = pq.read_table(out).sort_by("id").to_pylist()
        for g, w in zip(got, want, strict=True):
            assert (g["id"], g["reference"], g["day"]) == (w["id"], w["reference"], w["day"])
            assert g["exact_match"] == (w["reference"] == w[output])
            assert g[output] == w[output]


def test_a_column_added_later_reads_as_null_from_older_files(tmp_path):
    # Issue 65 #12: the older file lacks 'category'; it read as an error
    # naming that file, and reads as null, as deltalake reads it.
    path = tmp_path / "evolved"
    write_deltalake(str(path), rows(0, 20))
    later = rows(20, 10).append_column("category", pa.array([f"c{i % 3}" for i in range(10)]))
    write_deltalake(str(path), later, mode="append", schema_mode="merge")
    out = tmp_path / "now.parquet"
    r = score(str(path), out.with_name("plain.parquet"))
    assert r.returncode == 0, r.stderr
    r = subprocess.run([BIN, "score", str(path), "-o", str(out), "--metrics", "exact_match",
                        "--keep", "category"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    want = DeltaTable(str(path)).to_pyarrow_table().sort_by("id").select(["id", "category"]).to_pylist()
    assert sum(w["category"] is None for w in want) == 20
    assert pq.read_table(out).sort_by("id").select(["id", "category"]).to_pylist() == want
    out = tmp_path / "then.parquet"
    assert score(str(path), out, "--table-version", "0").returncode == 0
    assert result_rows(out) == expected_rows(DeltaTable(str(path), version=0))


def test_a_table_feature_refscore_cannot_read_is_refused_naming_it(tmp_path):
    path = tmp_path / "future"
    write_deltalake(str(path), rows(0, 3))
    commit(path, 1, [{"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                                   "readerFeatures": ["deletionVectors", "zOrderedTeleport"],
                                   "writerFeatures": ["deletionVectors", "zOrderedTeleport"]}}])
    out = tmp_path / "out.parquet"
    r = score(str(path), out)
    assert r.returncode == 78, r.stderr
    assert "zOrderedTeleport" in r.stderr and one_line(r), r.stderr
    assert not out.exists()
    assert score(str(path), out, "--table-version", "0").returncode == 0


def one_line(r):
    return len(r.stderr.strip().splitlines()) == 1
