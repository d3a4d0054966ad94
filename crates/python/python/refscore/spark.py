"""refscore on Apache Spark (a local Spark, a standalone cluster, Databricks,
EMR, Dataproc, Spark on Kubernetes).

- :func:`score` maps a Spark DataFrame through ``DataFrame.mapInArrow``
  (Arrow batches in and out) with one :class:`refscore.Scorer` per Python
  worker process, built on first use and kept: the model loads once per
  worker, not per partition. The result is a DataFrame with the CLI's
  columns and types.
- ``python -m refscore.spark INPUT -o OUTDIR [score options]`` (and
  :func:`run`) runs the CLI's own job in shards on the executors: one part
  per shard, the merged summary, and a re-run after a lost executor or a
  killed driver finishes only what is missing.

Options are ``refscore score``'s (``metrics=[...]``, ``model=...``,
``judge_url=...``), checked on the driver before any task runs.
"""

import argparse
import json
import os
import sys
from typing import Any, Callable, Dict, Iterator, List, Optional

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

from . import Scorer, _native, _shards
from ._errors import CONFIG, USAGE, RefscoreError
from ._options import flags as _flags

__all__ = ["score", "run", "main"]

#: The Scorers of this Python worker process, by their options: built on a
#: task's first batch and kept for every later task the process runs.
_SCORERS: Dict[str, Scorer] = {}


def _scorer(options: Dict[str, Any]) -> Scorer:
    key = json.dumps(options, sort_keys=True)
    scorer = _SCORERS.get(key)
    if scorer is None:
        scorer = _SCORERS[key] = Scorer(**options)
    return scorer


def _conf(spark: SparkSession, key: str, default: str) -> str:
    return spark.sparkContext.getConf().get(key, default)


def _task_cpus(spark: SparkSession) -> int:
    return max(1, int(_conf(spark, "spark.task.cpus", "1")))


def _task_gpus(spark: SparkSession) -> float:
    return float(_conf(spark, "spark.task.resource.gpu.amount", "0"))


def _slots(spark: SparkSession) -> int:
    """Tasks the cluster runs at once now: its cores over ``spark.task.cpus``."""
    return max(1, spark.sparkContext.defaultParallelism // _task_cpus(spark))


def _worker_options(spark: SparkSession, options: Dict[str, Any]) -> Dict[str, Any]:
    """The options each task's Scorer gets: paths as text (the options are
    shipped to the workers and key their Scorers), ``threads`` from
    ``spark.task.cpus``, the encoder on CUDA where tasks hold a GPU."""
    worker = {k: (os.fspath(v) if isinstance(v, os.PathLike) else v) for k, v in options.items()}
    worker.setdefault("threads", _task_cpus(spark))
    if _task_gpus(spark) > 0:
        worker.setdefault("device", "cuda")
    return worker


def _speculation(spark: SparkSession) -> bool:
    return _conf(spark, "spark.speculation", "false").lower() == "true"


def _share(total: Optional[int], tasks: int, name: str) -> Optional[int]:
    """One task's part of a cluster-wide budget per minute (rounded down,
    so the parts never add up to more than the whole)."""
    if total is None:
        return None
    if total < tasks:
        raise RefscoreError(
            f"{name} {total}: less than one per minute for each of the {tasks} tasks that run at once; "
            f"raise it or use fewer partitions/shards", CONFIG)
    return total // tasks


def _shares(plan: Dict[str, Any], tasks: int) -> Dict[str, int]:
    """One task's share of each judge budget the run has (``judge_rpm``,
    ``judge_tpm``, however given: flag or config file), when at most
    ``tasks`` tasks run at once: together they stay within the budget."""
    shares = {name: _share(plan[name], tasks, name) for name in ("judge_rpm", "judge_tpm")}
    return {name: share for name, share in shares.items() if share is not None}


def _budget_flags(flags: List[str], shares: Dict[str, int]) -> List[str]:
    """``flags`` with the judge's budgets replaced by ``shares``."""
    if not shares:
        return flags
    out: List[str] = []
    skip = False
    for flag in flags:
        if skip:
            skip = False
            continue
        name = flag.split("=", 1)[0]
        if name in ("--judge-rpm", "--judge-tpm"):
            skip = "=" not in flag
            continue
        out.append(flag)
    for name, share in shares.items():
        out += ["--" + name.replace("_", "-"), str(share)]
    return out


def _spark_types(schema: pa.Schema) -> pa.Schema:
    """The result schema in types Spark has: it has no unsigned integers, so
    those widen to the next signed type (``judge_latency_ms``: uint32 to
    int64), which holds every value."""
    wider = {pa.uint8(): pa.int16(), pa.uint16(): pa.int32(), pa.uint32(): pa.int64(), pa.uint64(): pa.decimal128(20, 0)}
    return pa.schema([f.with_type(wider.get(f.type, f.type)) for f in schema], metadata=schema.metadata)


def _score_partition(options: Dict[str, Any], target: pa.Schema) -> Callable:
    """The function each task runs: the partition's batches scored as one
    input by this process's Scorer, returned in the types Spark expects.
    Every row of the partition is checked before any is scored, so a task
    that fails on bad data fails before the model or the judge runs, and
    Spark's retries of it fail the same way at once, paying nothing."""

    def score_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        batches = [b for b in batches if b.num_rows]
        if not batches:
            return
        try:
            result = _scorer(options).score(pa.Table.from_batches(batches))
        except RefscoreError as e:
            ctx = TaskContext.get()
            where = f"partition {ctx.partitionId()}: " if ctx is not None else ""
            raise RefscoreError(f"{where}{e.message}", e.exit_code) from None
        yield from result.cast(target).to_batches()

    return score_partition


def score(df: DataFrame, **options: Any) -> DataFrame:
    """Scores a Spark DataFrame; returns a DataFrame with the CLI's output
    columns and types (``id``, the metrics, ``status``, ``error``, any
    ``keep`` columns), one row per input row.

    ``options`` are ``refscore score``'s, checked here on the driver with
    the column mapping, before any task runs (a bad one raises
    :class:`RefscoreError` with the CLI's message and exit code). Each task
    runs ``spark.task.cpus`` threads (``threads`` overrides). Spark keeps no
    row order, so rows need an id column (``id_col`` or a default name).
    With a judge budget (``judge_rpm``, ``judge_tpm``) the DataFrame is
    coalesced to at most the cluster's task slots (no shuffle) and each
    task gets its share, so the whole cluster stays within it. Nothing is
    scored until an action (``write``, ``collect``) runs."""
    spark = df.sparkSession
    worker = _worker_options(spark, options)
    large = spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false").lower() == "true"
    flags = _flags(worker)
    plan = _native.plan(flags, to_arrow_schema(df.schema, prefers_large_types=large), True)
    if plan["id_column"] is None:
        raise RefscoreError(
            "data: no id column: Spark keeps no row order, so each result row is matched to its input by an "
            "id; name one with id_col", CONFIG)
    if plan["judged"] and _speculation(spark):
        raise RefscoreError(
            "spark.speculation=true: a speculative copy of a task would ask the judge again (paying twice, "
            "and past any budget); turn it off for judge metrics", CONFIG)
    if plan["judge_rpm"] is not None or plan["judge_tpm"] is not None:
        tasks = min(df.rdd.getNumPartitions(), _slots(spark))
        df = df.coalesce(max(1, tasks))
        worker.update(_shares(plan, max(1, tasks)))
    spark_schema = from_arrow_schema(_spark_types(plan["result_schema"]))
    target = to_arrow_schema(spark_schema, prefers_large_types=large)
    return df.mapInArrow(_score_partition(worker, target), spark_schema)


def _shard_task(input: str, outdir: str, shards: int, flags: List[str], threads: int) -> Callable:
    def run_shards(ks: Iterator[int]) -> Iterator[Dict[str, Any]]:
        for k in ks:
            yield _shards.run_shard(input, outdir, k, shards, flags, threads)

    return run_shards


def _input_schema(input: str) -> Optional[pa.Schema]:
    """The columns of the input's first Parquet file (in the order the CLI
    reads them), read here on the driver from its footer without a Spark
    job; None when nothing is found (the shards then say so, as the CLI)."""
    import glob

    import pyarrow.parquet as pq

    paths = sorted(glob.glob(input, recursive=True)) if glob.has_magic(input) else [input]
    for path in paths:
        if "://" in path:
            return None  # an object-store URL: the shards read and check it
        if os.path.isdir(path):
            found = sorted(os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith(".parquet"))
            if found:
                return pq.read_schema(found[0])
        elif os.path.isfile(path):
            return pq.read_schema(path)
    return None


def run(input: str, outdir: str, *, flags: List[str], shards: Optional[int] = None,
        spark: Optional[SparkSession] = None) -> Dict[str, Any]:
    """The ``python -m refscore.spark`` job: ``refscore score`` over INPUT
    (Parquet: a file, a folder or a glob, on storage every executor reads)
    in S shards (default: the cluster's task slots now; fixed by the first
    run), one Spark task each, writing ``OUTDIR/part-K-of-S.parquet`` and
    ``OUTDIR/summary.json``. Returns the merged summary. Options are
    checked on the driver first; a shard's refscore error ends the job with
    its message and exit code (no retry: it would fail the same way); a lost
    task is retried by Spark and resumes from its last commit."""
    spark = spark or SparkSession.builder.getOrCreate()
    _shards.check_flags(flags)
    if _speculation(spark):
        raise RefscoreError(
            "spark.speculation=true: a speculative copy of a shard would run beside it on the same part; "
            "turn it off for this job", CONFIG)
    if _task_gpus(spark) > 0 and "--device" not in flags:
        flags = [*flags, "--device", "cuda"]
    schema = _input_schema(input)
    plan = _native.plan(flags, schema, False) if schema is not None else {"judge_rpm": None, "judge_tpm": None}
    shards = _shards.begin(input, outdir, flags, shards, _slots(spark), "refscore-spark.json")
    # One shard per task: at most `shards` tasks run at once, whatever the
    # cluster grows to, so each gets 1/shards of the judge's budget.
    task_flags = _budget_flags(flags, _shares(plan, shards))
    sc = spark.sparkContext
    sc.setJobDescription(f"refscore: {shards} shards of {input}")
    outcomes = sc.parallelize(range(1, shards + 1), shards).mapPartitions(
        _shard_task(_shards.input_location(input), os.path.abspath(outdir), shards, task_flags, _task_cpus(spark))
    ).collect()
    return _shards.finish(outdir, shards, outcomes)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m refscore.spark",
        description="Score Parquet data on a Spark cluster: the refscore CLI's job in shards, one Spark task "
                    "each. Any other option is a `refscore score` option (--metrics, --model, ...). Re-running "
                    "the same command after a failure finishes only what is missing.",
    )
    parser.add_argument("input", help="a Parquet file, a folder of them, or a quoted glob, on storage every "
                                      "executor reads (a shared or mounted file system: NFS, /dbfs, /Volumes)")
    parser.add_argument("-o", "--output", required=True, metavar="OUTDIR",
                        help="folder for the part files (part-K-of-S.parquet) and summary.json, on the same "
                             "kind of storage")
    parser.add_argument("--shards", type=int,
                        help="parts to cut the input into [the cluster's task slots]; fixed by the first run")
    parser.add_argument("--master", help="Spark master URL [spark-submit's or SparkSession's default]")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for this job's session (repeatable), e.g. spark.task.cpus=2")
    args, flags = parser.parse_known_args(argv)
    builder = SparkSession.builder.appName("refscore")
    if args.master:
        builder = builder.master(args.master)
    for setting in args.conf:
        key, eq, value = setting.partition("=")
        if not eq:
            print(f"refscore: error: --conf {setting}: expected KEY=VALUE", file=sys.stderr)
            return USAGE
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        return _shards.main_exit(lambda: run(args.input, args.output, flags=flags, shards=args.shards, spark=spark),
                                 args.output)
    finally:
        spark.stop()


if __name__ == "__main__":
    # Through the importable module, so Spark ships its functions by reference.
    from refscore.spark import main as _main

    sys.exit(_main())
