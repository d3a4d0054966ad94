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
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

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


def test_deletion_vectors_are_refused_by_name(tmp_path):
    # deltalake does not write deletion vectors: the commit that adds one is
    # written here as Delta's protocol lays it out (an inline vector).
    path = tmp_path / "dv"
    write_deltalake(str(path), rows(0, 3))
    first = [json.loads(line) for line in (path / "_delta_log" / f"{0:020d}.json").read_text().splitlines()]
    add = next(a["add"] for a in first if "add" in a)
    at = add["modificationTime"] + 1
    vector = {"storageType": "i", "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
              "offset": None, "sizeInBytes": 36, "cardinality": 1}
    commit = [
        {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                      "readerFeatures": ["deletionVectors"], "writerFeatures": ["deletionVectors"]}},
        {"remove": {"path": add["path"], "deletionTimestamp": at, "dataChange": True}},
        {"add": {**add, "deletionVector": vector}},
        {"commitInfo": {"timestamp": at, "operation": "DELETE"}},
    ]
    (path / "_delta_log" / f"{1:020d}.json").write_text("".join(json.dumps(c) + "\n" for c in commit))
    out = tmp_path / "out.parquet"
    r = score(str(path), out)
    assert r.returncode == 78, r.stderr
    assert "deletionVectors" in r.stderr and one_line(r), r.stderr
    assert not out.exists()
    # The version before the vector reads.
    assert score(str(path), out, "--table-version", "0").returncode == 0


def one_line(r):
    return len(r.stderr.strip().splitlines()) == 1
