"""Results appended to a Delta table (`-o TABLE --output-format delta`), read
back by readers refscore did not write: deltalake (delta-rs) and Polars.

Two nights are appended, each in one commit that records the run's identity
as a Delta transaction identifier; the second night adds a metric, which
adds a nullable column to the table. Running a finished night again, with or
without --resume, adds nothing. Every row equals refscore's own Parquet
output of the same input and flags.

Run through scripts/test.sh; REFSCORE_BIN names the binary.
"""

import json
import os
import subprocess
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("REFSCORE_BIN", str(ROOT / "target" / "release" / "refscore"))
EXAMPLE = ROOT / "examples" / "qa.parquet"
COLUMNS = ["id", "exact_match", "status", "error", "reference", "output"]


def run(*args):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=300)


def night(tmp_path, name, start, stop):
    """An input file of the example's rows start..stop."""
    path = tmp_path / f"{name}.parquet"
    pq.write_table(pq.read_table(EXAMPLE).slice(start, stop - start), path)
    return path


def score(spec, out, metrics, *extra):
    return run("score", str(spec), "-o", str(out), "--metrics", metrics,
               "--keep", "reference,output", *extra)


def rows(table, columns):
    return table.select(columns).sort_by("id").to_pylist()


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    """Night 1 (exact_match), night 2 (exact_match and token_f1) appended
    to one table; each night's Parquet output for comparison; what the
    reruns said."""
    tmp = tmp_path_factory.mktemp("delta-out")
    table = tmp / "results"
    first = night(tmp, "night1", 0, 120)
    second = night(tmp, "night2", 120, 309)
    done = {}
    r = score(first, table, "exact_match", "--output-format", "delta")
    assert r.returncode == 0, r.stderr
    done["first"] = r
    r = score(second, table, "exact_match,token_f1", "--output-format", "delta", "--resume")
    assert r.returncode == 0, r.stderr
    # The finished night again: resumed, and as the same command.
    done["resumed"] = score(second, table, "exact_match,token_f1", "--output-format", "delta",
                            "--resume")
    done["again"] = score(first, table, "exact_match", "--output-format", "delta")
    for name, spec, metrics in (("night1", first, "exact_match"),
                                ("night2", second, "exact_match,token_f1")):
        r = score(spec, tmp / f"{name}.result.parquet", metrics)
        assert r.returncode == 0, r.stderr
    return {
        "table": table,
        "night1": pq.read_table(tmp / "night1.result.parquet"),
        "night2": pq.read_table(tmp / "night2.result.parquet"),
        "runs": done,
        "tmp": tmp,
    }


def test_the_history_shows_exactly_two_appends_each_naming_its_run(nights):
    table = nights["table"]
    history = sorted(DeltaTable(str(table)).history(), key=lambda c: c["version"])
    assert [c["version"] for c in history] == [0, 1]
    assert [c["operation"] for c in history] == ["CREATE TABLE", "WRITE"]
    ids = []
    for commit in history:
        ids.append(commit["operationParameters"]["refscore.run_id"])
        summary = json.loads((table / "_refscore" / f"{ids[-1]}.summary.json").read_text())
        assert summary["run_id"] == ids[-1]
        assert summary["output"] == str(table)
    assert len(set(ids)) == 2
    # The transaction identifiers deltalake reads from the log.
    dt = DeltaTable(str(table))
    assert [dt.transaction_version(f"refscore:{i}") for i in ids] == [1, 1]
    assert dt.transaction_version("refscore:another-run") is None


def test_a_finished_night_run_again_adds_nothing(nights):
    for name in ("resumed", "again"):
        r = nights["runs"][name]
        assert r.returncode == 0, (name, r.stderr)
        assert "already holds this run's rows" in r.stderr, (name, r.stderr)
    assert DeltaTable(str(nights["table"])).version() == 1
    # Nothing of the runs is left but their summaries.
    left = sorted(p.name for p in (nights["table"] / "_refscore").iterdir())
    assert all(n.endswith(".summary.json") for n in left), left
    assert len(left) == 2


def test_deltalake_reads_each_night_as_refscore_wrote_it(nights):
    table = str(nights["table"])
    n1, n2 = nights["night1"], nights["night2"]
    v0 = DeltaTable(table, version=0).to_pyarrow_table()
    assert v0.num_rows == n1.num_rows == 120
    assert rows(v0, COLUMNS) == rows(n1, COLUMNS)
    latest = DeltaTable(table).to_pyarrow_table()
    assert latest.num_rows == n1.num_rows + n2.num_rows == 309
    # The second night's new metric is a nullable column: null for night 1.
    assert latest.schema.field("token_f1").nullable
    first_ids = set(n1.column("id").to_pylist())
    got = rows(latest, COLUMNS + ["token_f1"])
    want = rows(n2, COLUMNS + ["token_f1"])
    want += [dict(r, token_f1=None) for r in rows(n1, COLUMNS)]
    assert sorted(got, key=lambda r: r["id"]) == sorted(want, key=lambda r: r["id"])
    assert all(r["token_f1"] is None for r in got if r["id"] in first_ids)


def test_duckdb_delta_scan_reads_the_same_rows(nights):
    """DuckDB's own Delta reader (its delta extension, in a venv of DuckDB
    1.4.4 that the test command makes, since the extension's wheel is built
    for that version only) sees both nights: the rows and the new column's
    nulls, and the first version alone."""
    python = os.environ.get("REFSCORE_DUCKDB_DELTA_PYTHON")
    if not python:
        pytest.skip("REFSCORE_DUCKDB_DELTA_PYTHON not set (scripts/test.sh sets it)")
    script = (
        "import glob, json, sys, duckdb, duckdb_ext\n"
        "ext = glob.glob(duckdb_ext.__path__[0] + '/extensions/v*/linux_amd64/delta.duckdb_extension')[0]\n"
        "c = duckdb.connect()\n"
        "c.execute(f\"LOAD '{ext}'\")\n"
        "cols = ', '.join(json.loads(sys.argv[2]))\n"
        "q = f\"SELECT {cols}, token_f1 FROM delta_scan('{sys.argv[1]}') ORDER BY id\"\n"
        "names = [d[0] for d in c.execute(q).description]\n"
        "print(json.dumps([dict(zip(names, r)) for r in c.execute(q).fetchall()]))\n"
    )
    table = str(nights["table"])
    out = subprocess.run([python, "-c", script, table, json.dumps(COLUMNS)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    want = rows(nights["night2"], COLUMNS + ["token_f1"])
    want += [dict(r, token_f1=None) for r in rows(nights["night1"], COLUMNS)]
    want = sorted(want, key=lambda r: r["id"])
    assert len(got) == 309
    assert [r["id"] for r in got] == [r["id"] for r in want]
    for g, w in zip(got, want):
        for name in COLUMNS:
            assert g[name] == w[name], (name, g, w)
        # DuckDB reads the f32 column as FLOAT and hands Python a double.
        assert (g["token_f1"] is None) == (w["token_f1"] is None)
        if w["token_f1"] is not None:
            assert abs(g["token_f1"] - w["token_f1"]) < 1e-6


def test_polars_reads_the_same_rows(nights):
    frame = pl.read_delta(str(nights["table"]))
    assert frame.height == 309
    want = pa.concat_tables([
        nights["night1"].select(COLUMNS),
        nights["night2"].select(COLUMNS),
    ])
    assert rows(frame.select(COLUMNS).to_arrow(), COLUMNS) == rows(want, COLUMNS)
    first = pl.read_delta(str(nights["table"]), version=0)
    assert first.height == 120 and "token_f1" not in first.columns


def report(*args):
    """`refscore report ... --json` as a dict."""
    out = Path(args[-1])
    r = run("report", *args[:-1], "--json", str(out))
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text())


def test_report_reads_one_night_from_the_table_as_from_its_parquet_output(nights):
    table, tmp = str(nights["table"]), nights["tmp"]
    history = sorted(DeltaTable(table).history(), key=lambda c: c["version"])
    for version, name in ((0, "night1"), (1, "night2")):
        want = report(str(tmp / f"{name}.result.parquet"), tmp / f"{name}.want.json")
        run_id = history[version]["operationParameters"]["refscore.run_id"]
        for night in (str(version), run_id):
            got = report(table, "--night", night, tmp / f"{name}.{night}.json")
            assert got["result"]["rows"] == want["result"]["rows"], night
            assert got["result"]["statuses"] == want["result"]["statuses"], night
            assert got["metrics"] == want["metrics"], night
    # The whole table without --night; and a night the table lacks.
    assert report(table, tmp / "all.json")["result"]["rows"] == 309
    r = run("report", table, "--night", "no-such-run", "--json", str(tmp / "x.json"))
    assert r.returncode == 64, r.stderr
    assert "holds no run" in r.stderr


def test_a_format_refscore_does_not_write_is_refused_in_one_line(tmp_path):
    r = score(EXAMPLE, tmp_path / "t", "exact_match", "--output-format", "iceberg")
    assert r.returncode == 64, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "--output-format iceberg" in r.stderr
    assert not (tmp_path / "t").exists()


def test_a_folder_holding_other_files_is_no_table_to_make(tmp_path):
    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    r = score(EXAMPLE, folder, "exact_match", "--output-format", "delta")
    assert r.returncode == 78, r.stderr
    assert "no Delta table" in r.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]


def test_a_column_of_another_type_is_refused_before_any_work(nights, tmp_path):
    # The table's id is a string; an input whose id is an integer does not fit.
    table = pq.read_table(EXAMPLE).slice(0, 10)
    ints = table.set_column(0, "id", pa.array(range(10), pa.int64()))
    spec = tmp_path / "ints.parquet"
    pq.write_table(ints, spec)
    before = DeltaTable(str(nights["table"])).version()
    r = score(spec, nights["table"], "exact_match", "--output-format", "delta")
    assert r.returncode == 78, r.stderr
    assert "column 'id'" in r.stderr and "never rewrites" in r.stderr
    assert DeltaTable(str(nights["table"])).version() == before


def test_a_table_in_an_object_store_gets_the_same_appends(tmp_path):
    """The same two nights and a rerun, to a table on moto's S3: two
    versions, the rows refscore's Parquet output has, the summaries beside
    the table in the bucket."""
    from test_object_store import BUCKET, delta_storage, free_port, start_server, stop_server, \
        store_env, MOTO
    import boto3

    port = free_port()
    proc = start_server([str(MOTO), "-H", "127.0.0.1", "-p", str(port)], port)
    try:
        endpoint = f"http://127.0.0.1:{port}"
        client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                              aws_secret_access_key="testing-secret", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        env = store_env(endpoint, XDG_CACHE_HOME=str(tmp_path / "cache"))
        url = f"s3://{BUCKET}/tables/results"
        first = night(tmp_path, "night1", 0, 120)
        second = night(tmp_path, "night2", 120, 309)
        for spec, metrics in ((first, "exact_match"), (second, "exact_match,token_f1"),
                              (second, "exact_match,token_f1")):
            r = subprocess.run(
                [BIN, "score", str(spec), "-o", url, "--output-format", "delta", "--metrics",
                 metrics, "--keep", "reference,output", "--resume"],
                capture_output=True, text=True, env=env, timeout=300)
            assert r.returncode == 0, r.stderr
        assert "already holds this run's rows" in r.stderr
        dt = DeltaTable(url, storage_options=delta_storage(endpoint))
        history = sorted(dt.history(), key=lambda c: c["version"])
        assert [c["operation"] for c in history] == ["CREATE TABLE", "WRITE"]
        got = dt.to_pyarrow_table()
        assert got.num_rows == 309
        want = []
        for spec, metrics in ((first, "exact_match"), (second, "exact_match,token_f1")):
            out = tmp_path / f"{spec.stem}.result.parquet"
            r = score(spec, out, metrics)
            assert r.returncode == 0, r.stderr
            want.append(pq.read_table(out).select(COLUMNS))
        assert rows(got, COLUMNS) == rows(pa.concat_tables(want), COLUMNS)
        keys = sorted(o["Key"] for o in client.list_objects_v2(
            Bucket=BUCKET, Prefix="tables/results/_refscore/")["Contents"])
        ids = [c["operationParameters"]["refscore.run_id"] for c in history]
        assert keys == sorted(f"tables/results/_refscore/{i}.summary.json" for i in ids)
        # `report --night` reads one night from the table in the bucket, by
        # version and by run id, as from that night's Parquet output.
        for version, spec in ((0, first), (1, second)):
            want_path = tmp_path / f"{spec.stem}.want.json"
            r = run("report", str(tmp_path / f"{spec.stem}.result.parquet"), "--json",
                    str(want_path))
            assert r.returncode == 0, r.stderr
            want_report = json.loads(want_path.read_text())
            for which in (str(version), ids[version]):
                got_path = tmp_path / f"{spec.stem}.{which}.json"
                r = subprocess.run([BIN, "report", url, "--night", which, "--json", str(got_path)],
                                   capture_output=True, text=True, env=env, timeout=300)
                assert r.returncode == 0, r.stderr
                got_report = json.loads(got_path.read_text())
                assert got_report["result"]["rows"] == want_report["result"]["rows"], which
                assert got_report["metrics"] == want_report["metrics"], which
    finally:
        stop_server(proc)


def test_a_span_detectors_list_column_is_appended_and_read_back(tmp_path):
    # LettuceDetect-style span detectors write `cross_spans`, a list of
    # structs per row: a Delta table holds it as Parquet does, deltalake,
    # Polars and report read it.
    fixture = ROOT / "tests" / "fixtures" / "lettuce-tiny-token-modernbert.jsonl"
    model = ROOT / "tests" / "fixtures" / "models" / "tiny-token-modernbert"
    lines = [json.loads(line) for line in fixture.read_text().splitlines()[1:]]
    spec = tmp_path / "rows.parquet"
    pq.write_table(pa.table({k: [r.get(k) for r in lines] for k in ("id", "question", "reference", "output")}), spec)
    flags = ["--metrics", "cross_score", "--cross-model", str(model)]
    table, file = tmp_path / "spans", tmp_path / "spans.parquet"
    for out, extra in ((table, ["--output-format", "delta"]), (file, [])):
        r = run("score", str(spec), "-o", str(out), *flags, *extra)
        assert r.returncode == 0, r.stderr
    want = rows(pq.read_table(file), ["id", "cross_score", "cross_spans"])
    assert any(r["cross_spans"] for r in want), "the fixture has rows with spans"
    assert rows(DeltaTable(str(table)).to_pyarrow_table(), ["id", "cross_score", "cross_spans"]) == want
    assert pl.read_delta(str(table)).sort("id").select(["id", "cross_score", "cross_spans"]).to_dicts() == want
    got, plain = report(str(table), tmp_path / "table.json"), report(str(file), tmp_path / "file.json")
    assert got["result"]["rows"] == len(want) and got["metrics"] == plain["metrics"]
