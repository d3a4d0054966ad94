"""Damaged pages are refused: a file written by pyarrow with page checksums
(`write_page_checksum=True`) whose bytes were flipped afterwards must fail
with exit 65 naming the file, the column and the row group, as pyarrow with
verification refuses it, and leave nothing behind. Through the real binary.
"""

import os
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("REFSCORE_BIN", str(ROOT / "target" / "release" / "refscore"))


def write_checksummed(path, rows=2000, group=1000):
    long = [f"answer number {i} " * 8 for i in range(rows)]
    table = pa.table({"reference": long, "output": long})
    pq.write_table(
        table,
        path,
        row_group_size=group,
        compression="NONE",
        use_dictionary=False,
        write_page_checksum=True,
    )


def flip_inside_last_page(path, row_group, column):
    meta = pq.ParquetFile(path).metadata.row_group(row_group).column(column)
    start = meta.data_page_offset
    end = start + meta.total_compressed_size
    data = bytearray(path.read_bytes())
    data[end - 100] ^= 0x20  # inside the page body, not its header
    path.write_bytes(bytes(data))


def test_intact_checksummed_file_is_scored(tmp_path):
    src = tmp_path / "ok.parquet"
    write_checksummed(src)
    out = tmp_path / "o.parquet"
    subprocess.run([BIN, "score", str(src), "-o", str(out), "-q", "--metrics", "lexical"], check=True)
    assert pq.read_table(out).num_rows == 2000


def test_flipped_bytes_fail_with_65_naming_file_column_and_row_group(tmp_path):
    src = tmp_path / "damaged.parquet"
    write_checksummed(src)
    flip_inside_last_page(src, row_group=1, column=1)
    with pytest.raises(Exception):
        pq.read_table(src, page_checksum_verification=True)
    out = tmp_path / "o.parquet"
    run = subprocess.run(
        [BIN, "score", str(src), "-o", str(out), "-q", "--metrics", "lexical"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 65, run.stderr
    err = run.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert "damaged.parquet" in err and "column 'output'" in err and "row group 1" in err, err
    assert "checksum" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["damaged.parquet"], "nothing left behind"
