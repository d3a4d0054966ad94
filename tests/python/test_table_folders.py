"""A Delta Lake table's folder holds Parquet files of every version: files
that later versions removed are still there until a vacuum. Written by the
`deltalake` package (delta-rs) with an append, a delete and an overwrite,
such a folder must be refused, never scored as loose files (which counted
210 rows for a table of 60).

Run through scripts/test.sh; REFSCORE_BIN names the binary.
"""

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
        }
    )


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    path = tmp_path_factory.mktemp("delta") / "night"
    write_deltalake(str(path), rows(0, 50))
    write_deltalake(str(path), rows(50, 50), mode="append")
    DeltaTable(str(path)).delete("id >= 60 and id < 100")
    write_deltalake(str(path), rows(1000, 60), mode="overwrite")
    return path


def test_the_table_holds_60_rows_in_files_of_more(table):
    # The premise: deltalake reads 60 live rows, the folder's files hold more.
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == 60
    files = list(table.glob("*.parquet"))
    loose = sum(pq.read_metadata(f).num_rows for f in files)
    assert loose > 60


@pytest.mark.parametrize("how", ["folder", "glob", "parent"])
def test_a_delta_folder_is_refused_with_78_and_no_output(table, tmp_path, how):
    spec = {
        "folder": str(table),
        "glob": str(table / "*.parquet"),
        "parent": str(table.parent),
    }[how]
    out = tmp_path / "scores.parquet"
    r = subprocess.run(
        [BIN, "score", spec, "-o", str(out), "--metrics", "lexical"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 78, r.stderr
    assert "Delta Lake table" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []
    r = subprocess.run([BIN, "inspect", spec], capture_output=True, text=True)
    assert r.returncode == 78 and "Delta Lake table" in r.stderr, r.stderr
