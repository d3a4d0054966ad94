"""Reads refscore's result file with DuckDB and Polars, the tools our users
analyse results in, and checks names, types and values.

Run through scripts/test.sh, which builds the binary and installs duckdb,
polars and pyarrow into a virtualenv. REFSCORE_BIN names the binary.
"""

import json
import os
import subprocess
from pathlib import Path

import duckdb
import polars as pl
import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("REFSCORE_BIN", str(ROOT / "target" / "release" / "refscore"))
EXAMPLE = ROOT / "examples" / "qa.parquet"

LEXICAL = ["exact_match", "contains_match", "exact_match_norm", "contains_match_norm", "token_f1"]


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("readback") / "scores.parquet"
    subprocess.run(
        [BIN, "score", str(EXAMPLE), "-o", str(out), "--quiet", "--metrics", "lexical", "--keep", "category"],
        check=True,
    )
    return out


def test_duckdb_reads_names_types_and_values(result):
    con = duckdb.connect()
    cols = con.execute(f"DESCRIBE SELECT * FROM read_parquet('{result}')").fetchall()
    names = [c[0] for c in cols]
    types = {c[0]: c[1] for c in cols}
    assert names == ["id", *LEXICAL, "status", "error", "category"]
    for m in LEXICAL:
        assert types[m] == "FLOAT"
    assert types["status"] == "VARCHAR" and types["error"] == "VARCHAR"

    inp = con.execute(f"SELECT count(*) FROM read_parquet('{EXAMPLE}')").fetchone()[0]
    out = con.execute(f"SELECT count(*) FROM read_parquet('{result}')").fetchone()[0]
    assert out == inp

    # Ids come back in input order.
    joined = con.execute(
        f"""SELECT count(*) FROM
            (SELECT id, row_number() OVER () AS n FROM read_parquet('{EXAMPLE}')) a
            JOIN (SELECT id, row_number() OVER () AS n FROM read_parquet('{result}')) b USING (n)
            WHERE a.id = b.id"""
    ).fetchone()[0]
    assert joined == inp

    # Null references are errors with null metrics, never NaN.
    bad = con.execute(
        f"""SELECT r.status, r.error, r.exact_match FROM read_parquet('{EXAMPLE}') e
            JOIN read_parquet('{result}') r USING (id) WHERE e.reference IS NULL"""
    ).fetchall()
    assert bad and all(s == "error" and err == "reference is null" and em is None for s, err, em in bad)
    nans = con.execute(f"SELECT count(*) FROM read_parquet('{result}') WHERE isnan(token_f1)").fetchone()[0]
    assert nans == 0


def test_polars_values_match_the_definitions(result):
    scores = pl.read_parquet(result)
    data = pl.read_parquet(EXAMPLE)
    assert scores.schema["exact_match"] == pl.Float32
    assert scores.schema["id"] == pl.String
    rows = data.join(scores, on="id")
    assert rows.height == data.height
    for r in rows.iter_rows(named=True):
        if r["status"] != "ok":
            continue
        ref, out = r["reference"].strip(), r["output"].strip()
        assert r["exact_match"] == float(ref == out), r["id"]
        assert r["contains_match"] == float(ref in out), r["id"]
        assert 0.0 <= r["token_f1"] <= 1.0
    # The summary beside it agrees with the file.
    summary = json.loads(Path(f"{result}.summary.json").read_text())
    assert summary["rows"] == scores.height
    em = scores["exact_match"].drop_nulls()
    got = next(m for m in summary["metrics"] if m["name"] == "exact_match")
    assert abs(got["mean"] - em.mean()) < 1e-9
