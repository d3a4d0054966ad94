"""refscore.spark on a real Spark (pyspark from PyPI, Java from the machine),
everything on 127.0.0.1: `local[2]` in this process for `score(df)`, and a
standalone master with two one-core workers for the job mode. The results
equal the CLI's on the same rows (lexical, embedding and scripted-judge
metrics), every row exactly once, also after kill -9 of a Python worker or
of an executor's JVM mid-job; bad options raise on the driver before any
task; the judge's budget holds across the cluster."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

if not os.environ.get("REFSCORE_REQUIRE_PACKAGE"):
    pytest.importorskip("refscore")
    pytest.importorskip("pyspark")
# The executors' Python is this one (it has refscore and pyarrow).
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
# Commit progress often, so a worker killed after a second has committed
# parts to resume from (Spark's workers inherit this environment).
os.environ["REFSCORE_COMMIT_SECONDS"] = "0.05,0.5"
from pyspark.sql import SparkSession  # noqa: E402

import refscore  # noqa: E402
import refscore.spark  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "common"))
import spark_cluster  # noqa: E402
from refscore_scripts import write_example_copies  # noqa: E402
from scripted_judge import ScriptedJudge  # noqa: E402
from mid_run import kill_after_first_commit  # noqa: E402

BIN = os.environ.get("REFSCORE_BIN", str(ROOT / "target" / "release" / "refscore"))
EXAMPLE = ROOT / "examples" / "qa.parquet"
MODEL = os.environ.get("REFSCORE_MODEL_DIR") or str(ROOT / "models" / "all-MiniLM-L6-v2")
# Every Spark JVM quiet and bound to loopback.
LOOPBACK = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1", "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false"}


@pytest.fixture(scope="module")
def spark():
    builder = SparkSession.builder.master("local[2]").appName("refscore-test")
    for k, v in LOOPBACK.items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    """A standalone master and two workers of one core each, on 127.0.0.1;
    yields the master's URL."""
    with spark_cluster.standalone(tmp_path_factory.mktemp("standalone"), workers=2, cores=1) as url:
        yield url


def meaning_match(user: str) -> str:
    """The scripted judge's Meaning Match verdict, fixed by the prompt."""
    verdict = "true" if len(user) % 3 else "false"
    return f'{{"meaning_match": {verdict}, "reason": "scripted"}}'


@pytest.fixture
def judge():
    j = ScriptedJudge(meaning_match)
    try:
        yield j
    finally:
        j.close()


def make_input(folder: Path, files: int, copies: int) -> Path:
    """The example rows, distinct copies, row groups of 100 (scripts/common)."""
    write_example_copies(str(folder), files=files, copies=copies, row_group_size=100)
    return folder


TIMED = ("judge_latency_ms",)


def by_id(table: pa.Table) -> dict:
    table = table.drop_columns([c for c in TIMED if c in table.column_names])
    rows = table.to_pylist()
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), "a row came out twice"
    return {r["id"]: r for r in rows}


def cli_by_id(tmp: Path, data: Path, *flags) -> dict:
    out = tmp / "cli.parquet"
    subprocess.run([BIN, "score", str(data), "-o", str(out), "--quiet", "--overwrite", *flags], check=True)
    return by_id(pq.read_table(out))


def assert_same(got: dict, want: dict):
    assert got.keys() == want.keys()
    for k, row in want.items():
        assert got[k].keys() == row.keys()
        for col, v in row.items():
            g = got[k][col]
            assert g == v or (isinstance(v, float) and abs(g - v) <= 1e-6), (k, col, g, v)


def test_score_dataframe_equals_cli(spark, judge, tmp_path):
    data = make_input(tmp_path / "in", files=2, copies=1)
    options = dict(metrics=["lexical", "embedding", "meaning_match"], model=MODEL, input_col="question",
                   judge_url=judge.url, judge_model="scripted", judge_reasons="never", judge_rpm=100000)
    flags = ["--metrics", "lexical,embedding,meaning_match", "--model", MODEL, "--input-col", "question",
             "--judge-url", judge.url, "--judge-model", "scripted", "--judge-reasons", "never"]
    want = cli_by_id(tmp_path, data, *flags)
    df = spark.read.parquet(str(data)).repartition(3)
    scored = refscore.spark.score(df, **options)
    # With a judge budget, at most the cluster's task slots (local[2]: 2)
    # run at once, each with its share.
    assert scored.rdd.getNumPartitions() == 2
    got = scored.toArrow()
    # The CLI's columns, in its order, with its types (Spark has no unsigned
    # integers: the judge's latency widens from uint32 to int64).
    cli = pq.read_schema(tmp_path / "cli.parquet")
    assert got.schema.names == cli.names
    for field in cli:
        want_type = pa.int64() if field.type == pa.uint32() else field.type
        assert got.schema.field(field.name).type == want_type, field
    assert_same(by_id(got), want)


def test_bad_options_raise_on_the_driver_before_any_task(spark, tmp_path):
    data = make_input(tmp_path / "in", files=1, copies=1)
    df = spark.read.parquet(str(data))
    sc = spark.sparkContext
    sc.setJobGroup("bad-options", "refscore's checks")
    cases = [
        (dict(metrics=["no_such_metric"]), 64, "unknown metric"),
        (dict(metrics=["lexical"], input_col="no_such_column"), None, "no_such_column"),
        (dict(metrics=["bertscore"], model=MODEL, idf=True), 78, "idf"),
        (dict(metrics=["lexical"], judge_where="x", no_such_option=1), 64, None),
    ]
    for options, code, text in cases:
        with pytest.raises(refscore.RefscoreError) as e:
            refscore.spark.score(df, **options)
        if code is not None:
            assert e.value.exit_code == code, e.value
        if text is not None:
            assert text in str(e.value)
    with pytest.raises(refscore.RefscoreError) as e:
        refscore.spark.score(df.drop("id"), metrics=["lexical"])
    assert e.value.exit_code == 78 and "no id column" in str(e.value)
    with pytest.raises(refscore.RefscoreError) as e:
        refscore.spark.run(str(data), str(tmp_path / "out"), flags=["--metrics", "nope"], spark=spark)
    assert e.value.exit_code == 64
    assert not (tmp_path / "out").exists()
    # None of it started a Spark job.
    assert list(sc.statusTracker().getJobIdsForGroup("bad-options")) == []
    sc.setJobGroup(None, None)


def test_bad_data_fails_its_task_with_the_one_line_message(spark, judge, tmp_path):
    rows = pa.table({"id": ["a", "b", "c"], "reference": ["row-a-ref", "row-b-ref", "row-c-ref"],
                     "output": ["row-a-out", "row-b-out", "row-c-out"],
                     "which": ["meaning_match", "no_such_metric", "meaning_match"]})
    pq.write_table(rows, tmp_path / "bad.parquet")
    df = spark.read.parquet(str(tmp_path / "bad.parquet")).coalesce(1)
    scored = refscore.spark.score(df, metrics=["meaning_match"], judge_url=judge.url, judge_model="scripted",
                                  judge_where="which")
    with pytest.raises(Exception) as e:
        scored.collect()
    text = str(e.value)
    assert "RefscoreError" in text and "no_such_metric" in text, text[-2000:]
    assert "partition 0: data: column 'which', row 1: unknown judge metric 'no_such_metric'" in text
    # Every row of the partition is checked before any is scored: no row
    # reached the judge (which saw only the Scorer's start-up probe).
    assert not [p for p in judge.prompts if "row-" in p], judge.prompts


def scoring_python_worker(proc: Path) -> bool:
    """A Spark Python worker (forked by pyspark.daemon) that has loaded
    refscore's native library: one running a shard."""
    return (b"pyspark.daemon" in (proc / "cmdline").read_bytes()
            and "refscore/_native" in (proc / "maps").read_text())


def executor_jvm(proc: Path) -> bool:
    return b"CoarseGrainedExecutorBackend" in (proc / "cmdline").read_bytes()


KILL_FLAGS = ["--metrics", "lexical,cosine", "--input-col", "question", "--model", MODEL, "--batch-size", "100"]


@pytest.fixture(scope="module")
def kill_input(tmp_path_factory):
    """Input for the kill tests, long enough to kill a worker mid-shard,
    and the CLI's output for it (computed once for both)."""
    tmp = tmp_path_factory.mktemp("kill")
    data = make_input(tmp / "in", files=2, copies=3)
    return data, cli_by_id(tmp, data, *KILL_FLAGS)


@pytest.mark.parametrize("victim", ["python worker", "executor jvm"])
def test_kill_9_mid_job_still_scores_every_row_once(standalone, kill_input, tmp_path, victim):
    data, want = kill_input
    flags = KILL_FLAGS
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "refscore.spark", str(data), "-o", str(out), "--master", standalone, *flags]
    driver = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    match = scoring_python_worker if victim == "python worker" else executor_jvm
    killed = kill_after_first_commit(driver, out, match)
    stdout, stderr = driver.communicate(timeout=300)
    assert killed is not None, "the run ended before anything could be killed"
    # Spark ran the lost shard again (a task whose Python worker died is
    # retried, spark.task.maxFailures=4; a lost executor's tasks are
    # rescheduled), and the shard resumed from its last commit.
    assert driver.returncode == 0, stderr[-3000:]
    parts = sorted(out.glob("part-*.parquet"))
    assert len(parts) == 2, "one shard per task slot: two one-core workers"
    got = by_id(pa.concat_tables(pq.read_table(p) for p in parts))
    assert_same(got, want)
    assert json.loads((out / "summary.json").read_text())["rows"] == len(want)
    if victim == "python worker":
        # A re-run finds every shard complete and rewrites nothing.
        again = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr[-3000:]
        assert [p.stat().st_mtime_ns for p in parts] == [p.stat().st_mtime_ns for p in sorted(out.glob("part-*.parquet"))]


def test_judge_budget_holds_across_the_cluster(spark, judge, tmp_path):
    """120 requests a minute for the whole cluster, two shards at once: each
    gets 60 (a minute's burst, then one a second). 140 rows: the first 120
    go at once, the last 20 take 10 s. At every moment the requests so far
    stay within the budget's burst plus its refill (5% slack); two shards
    with the whole budget each would send all 140 at once."""
    rows = pa.table({"id": [f"r{i}" for i in range(140)], "reference": [f"fact {i}" for i in range(140)],
                     "output": [f"claim {i}" for i in range(140)]})
    data = tmp_path / "in"
    data.mkdir()
    pq.write_table(rows.slice(0, 70), data / "a.parquet")
    pq.write_table(rows.slice(70), data / "b.parquet")
    flags = ["--metrics", "meaning_match", "--judge-url", judge.url, "--judge-model", "scripted",
             "--judge-reasons", "never", "--judge-rpm", "120"]
    summary = refscore.spark.run(str(data), str(tmp_path / "out"), flags=flags, shards=2, spark=spark)
    assert summary["rows"] == 140
    # Each shard's start-up probe (one request of one token, as the CLI
    # sends before any row) is outside the budget; the rows' requests:
    times = sorted(t for t, p in zip(judge.times, judge.prompts) if "claim " in p)
    assert len(times) == 140 and len(judge.times) == 142
    start = times[0]
    for n, t in enumerate(times, 1):
        allowed = 120 + 1.05 * 2.0 * (t - start) + 1
        assert n <= allowed, f"request {n} at {t - start:.2f}s: over the budget ({allowed:.1f})"
    # And it used the budget, rather than crawling (one shard's pace).
    assert times[-1] - start < 20, times[-1] - start


def test_judge_batches_from_the_job_mode(spark, judge, tmp_path):
    """--judge-batch dir: through the job mode: the first run submits and
    ends with 75, the same command collects, and the parts equal the
    online CLI's output."""
    data = make_input(tmp_path / "in", files=2, copies=1)
    base = ["--metrics", "lexical,meaning_match", "--judge-model", "scripted", "--judge-reasons", "never",
            "--input-col", "question"]
    want = cli_by_id(tmp_path, data, *base, "--judge-url", judge.url)
    box = tmp_path / "box"
    flags = [*base, "--judge-batch", f"dir:{box}"]
    out = tmp_path / "out"
    with pytest.raises(refscore.RefscoreError) as e:
        refscore.spark.run(str(data), str(out), flags=flags, spark=spark)
    assert e.value.exit_code == 75, e.value
    assert "run the same command again" in str(e.value)
    # What answers a request folder on another machine, here through the
    # scripted judge.
    subprocess.run([sys.executable, str(ROOT / "scripts" / "tools" / "answer-batch-dir.py"), "--judge-url", judge.url,
                    "--dir", str(box)], check=True, timeout=120)
    summary = refscore.spark.run(str(data), str(out), flags=flags, spark=spark)
    got = by_id(pa.concat_tables(pq.read_table(p) for p in sorted(out.glob("part-*.parquet"))))
    assert_same(got, want)
    assert summary["rows"] == len(want)


def test_a_budget_from_a_config_file_is_split_too(tmp_path):
    """The budget is the run's however it was given: a config file's
    judge_rpm is split like the flag's, and the task's flag wins over it."""
    config = tmp_path / "refscore.toml"
    config.write_text('judge_rpm = 120\njudge_tpm = 9000\njudge_url = "http://127.0.0.1:9/v1"\njudge_model = "m"\n')
    schema = pa.schema([("id", pa.string()), ("reference", pa.string()), ("output", pa.string())])
    flags = ["--config", str(config), "--metrics", "meaning_match"]
    plan = refscore._native.plan(flags, schema, False)
    assert (plan["judge_rpm"], plan["judge_tpm"]) == (120, 9000)
    task = refscore.spark._budget_flags(flags, refscore.spark._shares(plan, 7))
    share = refscore._native.plan(task, schema, False)
    assert (share["judge_rpm"], share["judge_tpm"]) == (120 // 7, 9000 // 7)
    # A flag given as --judge-rpm=N is replaced, not doubled.
    task = refscore.spark._budget_flags([*flags, "--judge-rpm=100"], refscore.spark._shares(plan, 2))
    assert task.count("--judge-rpm") == 1 and refscore._native.plan(task, schema, False)["judge_rpm"] == 60
    with pytest.raises(refscore.RefscoreError) as e:
        refscore.spark._shares(plan, 121)
    assert e.value.exit_code == 78 and "judge_rpm 120" in str(e.value)


SPECULATION = """
import sys
from pyspark.sql import SparkSession
import refscore, refscore.spark
spark = (SparkSession.builder.master("local[1]").config("spark.speculation", "true")
         .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1").getOrCreate())
df = spark.read.parquet(sys.argv[1])
refscore.spark.score(df, metrics=["lexical"])  # no judge: speculation is harmless
for call in (lambda: refscore.spark.score(df, metrics=["meaning_match"], judge_url="http://127.0.0.1:9/v1",
                                          judge_model="m"),
             lambda: refscore.spark.run(sys.argv[1], sys.argv[2], flags=["--metrics", "lexical"], spark=spark)):
    try:
        call()
        print("accepted")
    except refscore.RefscoreError as e:
        print(e.exit_code, e)
spark.stop()
"""


def test_speculation_is_refused_where_it_would_pay_the_judge_twice_or_run_a_shard_twice(tmp_path):
    # Its own driver: spark.speculation is fixed when a session starts.
    run = subprocess.run([sys.executable, "-c", SPECULATION, str(EXAMPLE), str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert lines[0].startswith("78 spark.speculation=true: a speculative copy of a task would ask the judge again")
    assert lines[1].startswith("78 spark.speculation=true: a speculative copy of a shard")
