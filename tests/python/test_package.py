"""The `refscore` Python package (crates/python), installed from the wheel
that scripts/env/build-wheel.sh builds: Scorer on pyarrow, Polars and DuckDB
data against the CLI's Parquet output, errors, score_parquet, and the
`refscore` console script running the README's first command."""

import os
import re
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

refscore = pytest.importorskip("refscore") if not os.environ.get("REFSCORE_REQUIRE_PACKAGE") else __import__("refscore")

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("REFSCORE_BIN", str(ROOT / "target" / "release" / "refscore"))
EXAMPLE = ROOT / "examples" / "qa.parquet"
MODEL = os.environ.get("REFSCORE_MODEL_DIR") or str(ROOT / "models" / "all-MiniLM-L6-v2")
OPTIONS = dict(metrics=["lexical", "embedding"], input_col="question", keep=["category"], model=MODEL)


def cli(tmp, *flags):
    out = tmp / "cli.parquet"
    subprocess.run([BIN, "score", str(EXAMPLE), "-o", str(out), "--quiet", "--overwrite", *flags], check=True)
    return pq.read_table(out)


def same_table(got: pa.Table, want: pa.Table, close: dict[str, float] | None = None):
    """Equal schemas and values; a column named in `close` may differ by at
    most its tolerance (nulls in the same rows)."""
    assert got.schema.remove_metadata() == want.schema.remove_metadata()
    assert got.num_rows == want.num_rows
    for name in want.column_names:
        g, w = got.column(name).to_pylist(), want.column(name).to_pylist()
        if close and name in close:
            assert [v is None for v in g] == [v is None for v in w], name
            worst = max((abs(a - b) for a, b in zip(g, w) if a is not None), default=0.0)
            assert worst <= close[name], (name, worst)
        else:
            assert g == w, name


@pytest.fixture(scope="module")
def cli_embedding(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli")
    return cli(tmp, "--metrics", "lexical,embedding", "--input-col", "question", "--keep", "category",
               "--model", MODEL)


@pytest.fixture(scope="module")
def scorer():
    return refscore.Scorer(**OPTIONS)


def test_scorer_on_pyarrow_polars_duckdb_equals_cli(scorer, cli_embedding):
    sources = {
        "pyarrow Table": pq.read_table(EXAMPLE),
        "pyarrow RecordBatchReader": pq.read_table(EXAMPLE).to_reader(max_chunksize=100),
        "Polars DataFrame": pl.read_parquet(EXAMPLE),
        "DuckDB result": duckdb.sql(f"SELECT * FROM read_parquet('{EXAMPLE}')").arrow(),
    }
    for what, data in sources.items():
        got = scorer.score(data)
        assert isinstance(got, pa.Table), what
        same_table(got, cli_embedding)


def test_bad_column_raises_the_cli_message(tmp_path):
    run = subprocess.run([BIN, "score", str(EXAMPLE), "-o", str(tmp_path / "x.parquet"), "--metrics", "lexical",
                          "--reference-col", "nope"], capture_output=True, text=True)
    cli_message = run.stderr.strip().removeprefix("refscore: error: ").replace(str(EXAMPLE), "data")
    with pytest.raises(refscore.RefscoreError) as e:
        refscore.Scorer(metrics=["lexical"], reference_col="nope").score(pq.read_table(EXAMPLE))
    assert (e.value.exit_code, str(e.value)) == (run.returncode, cli_message)
    assert e.value.exit_code == 65
    with pytest.raises(refscore.RefscoreError) as e:
        refscore.Scorer(metrics=["no_such_metric"])
    assert e.value.exit_code == 64 and "unknown metric 'no_such_metric'" in str(e.value)


def test_judge_batches_are_for_jobs_over_files(tmp_path):
    """Judge batches resume hours later: Scorer refuses them; score_parquet
    submits (here, request files for another machine) and raises exit 75."""
    box = tmp_path / "box"
    with pytest.raises(refscore.RefscoreError) as e:
        refscore.Scorer(metrics=["meaning_match"], judge_batch=f"dir:{box}")
    assert e.value.exit_code == 64 and "score_parquet" in str(e.value)
    with pytest.raises(refscore.RefscoreError) as e:
        refscore.score_parquet(EXAMPLE, tmp_path / "out.parquet", metrics=["meaning_match"],
                               judge_batch=f"dir:{box}", quiet=True)
    assert e.value.exit_code == 75 and "requests-001.jsonl" in str(e.value)
    assert (box / "requests-001.jsonl").stat().st_size > 0
    assert not (tmp_path / "out.parquet").exists()


def test_exit_code_constants_are_the_clis():
    """The package's constants come from the Rust table the CLI's --help is
    made from: the same codes, and the ones raised are among them."""
    from refscore import _errors
    run = subprocess.run([BIN, "--help"], capture_output=True, text=True, check=True)
    section = run.stdout.split("Exit codes:")[1]
    listed = {int(line.split()[0]) for line in section.splitlines() if line[:4].strip().isdigit()}
    assert listed == {0, *_errors.EXIT_CODES.values()}
    assert (_errors.USAGE, _errors.CONFIG) == (64, 78)


def test_metric_registry_names_the_columns_a_run_writes(scorer):
    """refscore.METRICS is the registry the CLI reads: the metric columns of
    a lexical + embedding run are exactly its members' columns, in order,
    and every default threshold is the one `score` records."""
    got = scorer.score(pq.read_table(EXAMPLE))
    names = got.column_names
    metric_columns = names[1:names.index("status")]
    wanted = [c for m in refscore.METRICS if m["group"] in ("lexical", "embedding") for c in m["columns"]]
    assert metric_columns == wanted
    assert {m["group"] for m in refscore.METRICS} == {"lexical", "embedding", "cross", "judge"}
    judge = {m["name"]: m for m in refscore.METRICS if m["group"] == "judge"}
    assert judge["similarity"]["reason_column"] == "similarity_rationale"
    assert all(m["kind"] in ("binary", "score") for m in refscore.METRICS)


def test_a_cross_encoder_scores_in_python_as_in_the_cli(tmp_path):
    """Scorer(cross_model=...) runs the same cross-encoder stage as
    `score --cross-model`: the same NLI columns, value for value."""
    nli = str(ROOT / "tests" / "fixtures" / "models" / "tiny-cross-roberta-nli")
    want = cli(tmp_path, "--metrics", "nli,token_f1", "--cross-model", nli)
    got = refscore.Scorer(metrics=["nli", "token_f1"], cross_model=nli).score(pq.read_table(EXAMPLE))
    same_table(got, want)
    assert "nli_equivalence" in got.column_names
    cross = {m["name"] for m in refscore.METRICS if m["group"] == "cross"}
    assert cross == {"cross_score", "nli_precision", "nli_recall", "nli_equivalence", "nli_contradiction"}
    with pytest.raises(refscore.RefscoreError) as e:
        refscore.Scorer(metrics=["cross_score"], cross_model=nli)
    assert e.value.exit_code == 78 and "one-output" in str(e.value)


def test_a_checker_recipe_is_a_python_keyword_as_in_the_cli(tmp_path):
    """Scorer(cross_recipe="factcg") is `score --cross-recipe factcg`: the
    checker's support as cross_score, value for value."""
    twin = str(ROOT / "tests" / "fixtures" / "models" / "tiny-cross-checker-deberta")
    want = cli(tmp_path, "--metrics", "cross_score", "--cross-model", twin, "--cross-recipe", "factcg")
    got = refscore.Scorer(metrics=["cross_score"], cross_model=twin,
                          cross_recipe="factcg").score(pq.read_table(EXAMPLE))
    # A chunked pair's inputs are grouped into forward batches with other
    # rows' chunks, and the Scorer meets the rows in other groups than the
    # CLI's pipeline does: DeBERTa's relative-attention products then run at
    # other padded lengths, which moves the last bits of an f32 (7.5e-9 seen
    # on AMD EPYC fam 25 model 17). Equal up to that, not bit for bit.
    same_table(got, want, close={"cross_score": 1e-6})
    with pytest.raises(refscore.RefscoreError) as e:
        refscore.Scorer(metrics=["nli_precision"], cross_model=twin, cross_recipe="factcg")
    assert e.value.exit_code == 78 and "cross_score" in str(e.value)


def test_score_parquet_runs_the_cli_job(tmp_path):
    out = tmp_path / "lexical.parquet"
    summary = refscore.score_parquet(EXAMPLE, out, metrics="lexical", input_col="question",
                                     threshold={"token_f1": 0.6}, quiet=True)
    assert summary["rows"] == 309 and Path(str(out) + ".summary.json").exists()
    assert [m["threshold"] for m in summary["metrics"] if m["name"] == "token_f1"] == [0.6]
    same_table(pq.read_table(out), cli(tmp_path, "--metrics", "lexical", "--input-col", "question"))
    with pytest.raises(refscore.RefscoreError) as e:
        refscore.score_parquet(EXAMPLE, out, metrics="lexical")
    assert e.value.exit_code == 78 and "already exists" in str(e.value)


def test_score_parquet_appends_to_a_delta_table_once(tmp_path):
    from deltalake import DeltaTable

    table = tmp_path / "results"
    first = refscore.score_parquet(EXAMPLE, table, output_format="delta", metrics="exact_match",
                                   quiet=True)
    assert first["rows"] == 309 and first["output"] == str(table)
    # The finished run again: nothing appended, the same summary back.
    again = refscore.score_parquet(EXAMPLE, table, output_format="delta", metrics="exact_match",
                                   resume=True, quiet=True)
    assert again["run_id"] == first["run_id"] and again["rows"] == 309
    dt = DeltaTable(str(table))
    assert dt.version() == 0 and dt.to_pyarrow_table().num_rows == 309
    # In-memory data returns its rows: no table to append to.
    with pytest.raises(refscore.RefscoreError) as e:
        refscore.Scorer(metrics="exact_match", output_format="delta")
    assert e.value.exit_code == 64 and "score_parquet" in str(e.value)
    # Ray's and Spark's job mode writes a Parquet part per shard.
    from refscore import _shards
    with pytest.raises(refscore.RefscoreError) as e:
        _shards.check_flags(["--metrics", "lexical", "--output-format", "delta"])
    assert e.value.exit_code == 64 and "--output-format delta" in str(e.value)


def test_score_parquet_returns_the_calibration_against_human_labels(tmp_path):
    # Human labels on every third row of the example: "the answer is right"
    # where the normalised texts match exactly.
    t = pq.read_table(EXAMPLE)
    exact = refscore.score_parquet(EXAMPLE, tmp_path / "e.parquet", metrics="exact_match_norm", quiet=True)
    assert exact["rows"] == t.num_rows
    right = pq.read_table(tmp_path / "e.parquet").column("exact_match_norm").to_pylist()
    labels = pa.array([bool(v) if i % 3 == 0 else None for i, v in enumerate(right)], pa.bool_())
    labelled = tmp_path / "labelled.parquet"
    pq.write_table(t.append_column("human", labels), labelled)
    summary = refscore.score_parquet(labelled, tmp_path / "o.parquet", metrics="lexical",
                                     input_col="question", gold={"token_f1": "human"}, quiet=True)
    c = summary["calibration"][0]
    assert (c["metric"], c["gold_column"], c["kind"]) == ("token_f1", "human", "stand_in")
    # Rows the example cannot score (a null text) have labels but no value.
    assert c["labels"] + c["labels_without_value"] == (t.num_rows + 2) // 3
    assert c["labels_without_value"] == sum(1 for i, v in enumerate(right) if i % 3 == 0 and v is None) > 0
    assert 0.5 < c["separation"]["auc"] <= 1.0
    with pytest.raises(refscore.RefscoreError) as e:
        refscore.score_parquet(labelled, tmp_path / "x.parquet", metrics="lexical", gold={"token_f1": "nope"})
    assert e.value.exit_code == 65 and "nope" in str(e.value)


def test_gil_is_released_while_scoring():
    data = pa.table({"id": [str(i) for i in range(200_000)], "reference": ["a b c d"] * 200_000,
                     "output": ["a b x d"] * 200_000})
    scorer = refscore.Scorer(metrics=["lexical"])
    ticks = []
    t = threading.Thread(target=lambda: ticks.append(scorer.score(data).num_rows))
    start = time.monotonic()
    t.start()
    beats = 0
    while t.is_alive():
        beats += 1
        time.sleep(0.001)
    assert ticks == [200_000]
    if time.monotonic() - start > 0.05:
        assert beats > 5, "the main thread ran while another thread scored"


def test_console_script_runs_the_readme_example(tmp_path):
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)```", readme, re.S).group(1)
    command = next(line for line in block.splitlines() if "cargo run --release --" in line)
    args = shlex.split(command.split("cargo run --release --", 1)[1])
    for name in ("examples", "models"):
        (tmp_path / name).symlink_to(ROOT / name)
    script = Path(sys.executable).with_name("refscore")
    run = subprocess.run([str(script), *args], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "wrote qa.scores.parquet" in run.stdout
    got = pq.read_table(tmp_path / "qa.scores.parquet")
    want = tmp_path / "native.parquet"
    subprocess.run([BIN, *[str(want) if a == "qa.scores.parquet" else a for a in args], "--quiet"],
                   cwd=tmp_path, check=True)
    same_table(got, pq.read_table(want))
    assert subprocess.run([str(script), "score", "--no-such-flag"], capture_output=True).returncode == 64


def test_a_defined_judge_metric_scores_in_python_as_in_the_cli(tmp_path):
    """A rubric from a --judge-metrics file, through Scorer and through the
    CLI, against a scripted judge on 127.0.0.1: the same columns and values,
    the prompt reading a column that is not kept."""
    from scripted_judge import ScriptedJudge

    def cites(user):
        verdict = "true" if "see 4.2" in user else "false"
        return f'{{"verdict": {verdict}, "reason": "scripted"}}'

    judge = ScriptedJudge(cites)
    seen = judge.prompts
    try:
        rubrics = tmp_path / "rubrics.toml"
        rubrics.write_text('[judge.metric.cites]\nanswer = "verdict"\n'
                           'prompt = "Section {{ row.section }}: {{ output }}"\n')
        data = pa.table({"id": ["a", "b"], "reference": ["Paris", "100 C"],
                         "output": ["Paris, see 4.2", "90 C"], "section": ["4.2", None]})
        options = dict(metrics=["cites"], judge_url=judge.url,
                       judge_model="scripted", judge_metrics=[str(rubrics)], judge_reasons="always")
        got = refscore.Scorer(**options).score(data)
        assert got.column("cites").to_pylist() == [True, False]
        assert got.column("cites_source").to_pylist() == ["judge", "judge"]
        assert got.column("cites_reason").to_pylist() == ["scripted", "scripted"]
        assert "Section 4.2: Paris, see 4.2" in seen and "Section : 90 C" in seen
        inp = tmp_path / "in.parquet"
        pq.write_table(data, inp)
        summary = refscore.score_parquet(inp, tmp_path / "out.parquet", quiet=True, **options)
        assert summary["judge"]["defined_metrics"]["cites"]["answer"] == "verdict"
        # Call times differ between two runs; everything else is the same.
        timed = "judge_latency_ms"
        same_table(got.drop_columns([timed]), pq.read_table(tmp_path / "out.parquet").drop_columns([timed]))
    finally:
        judge.close()


def test_a_list_of_judge_bands_is_a_chain_of_flags():
    # One --judge-band per tier, in order: a comma-joined value would be one
    # malformed band.
    from refscore._options import flags

    assert flags({"judge_band": ["token_f1:0.2..0.9", "nli_equivalence:0.1..0.8"]}) == [
        "--judge-band", "token_f1:0.2..0.9", "--judge-band", "nli_equivalence:0.1..0.8"]
    assert flags({"judge_band": "cosine:0.3..0.9"}) == ["--judge-band", "cosine:0.3..0.9"]
