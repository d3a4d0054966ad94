"""refscore on a Ray cluster.

- :func:`score` maps a ``ray.data.Dataset`` through an actor pool of
  :class:`refscore.Scorer` (the model loaded once per actor) and returns the
  scored Dataset, for pipelines that already read with Ray Data;
- ``python -m refscore.ray INPUT -o OUTDIR --workers N [score options]`` runs
  the CLI's own job in N shards across the cluster: part files, one summary,
  and a re-run after a failure finishes only what is missing.
"""

import argparse
import os
import sys
from typing import Any, Dict, List, Optional

import ray

from . import Scorer, _native, _shards
from ._errors import CONFIG, USAGE, RefscoreError
from ._options import flags as _flags

__all__ = ["score", "main"]


def _actor_cpus(workers: int, cpus_per_worker: float) -> float:
    """The logical CPUs each actor reserves. Actors that reserve every CPU of
    the cluster leave none for Ray Data's read and write tasks, and the
    pipeline hangs; so one CPU stays free (each actor still runs
    ``cpus_per_worker`` threads)."""
    total = ray.cluster_resources().get("CPU", 0)
    if workers * cpus_per_worker <= total - 1:
        return cpus_per_worker
    share = (total - 1) / workers
    if share <= 0:
        raise RefscoreError(
            f"workers={workers}: the cluster has {total:g} CPUs; Ray Data needs one besides the workers", CONFIG)
    return min(cpus_per_worker, share)


class _ScoreBatches:
    """One actor of the pool: a Scorer built once, applied to every batch."""

    def __init__(self, options: Dict[str, Any]):
        self.scorer = Scorer(**options)

    def __call__(self, batch):
        return self.scorer.score(batch)


def _worker_options(options: Dict[str, Any], cpus_per_worker: float, gpus_per_worker: float) -> Dict[str, Any]:
    options = dict(options)
    options.setdefault("threads", max(1, int(cpus_per_worker)))
    if gpus_per_worker and "device" not in options:
        options["device"] = "cuda"
    return options


def score(ds: "ray.data.Dataset", *, workers: int, cpus_per_worker: float = 1, gpus_per_worker: float = 0,
          **options: Any) -> "ray.data.Dataset":
    """Scores a Ray Dataset with ``workers`` actors, each a Scorer loaded once
    (``cpus_per_worker`` threads, ``gpus_per_worker`` GPUs; with GPUs the
    encoder runs on ``device="cuda"`` unless ``device`` says otherwise).
    ``options`` are the CLI's score options. Rows keep their columns' meaning
    but not their order, so the data needs an id column (``id_col`` or a
    default name/alias). Options and the column mapping are checked here, in
    the driver, before any actor starts."""
    if workers < 1:
        raise RefscoreError(f"workers={workers}: expected at least 1", USAGE)
    schema = ds.schema()
    base = getattr(schema, "base_schema", schema)
    worker = _worker_options(options, cpus_per_worker, gpus_per_worker)
    plan = _native.plan(_flags(worker), base)
    batch_size, id_column = plan["batch_size"], plan["id_column"]
    if id_column is None:
        raise RefscoreError(
            "data: no id column: Ray Data does not keep a global row order, so rows are told apart by an id; "
            "name one with id_col", CONFIG)
    return ds.map_batches(
        _ScoreBatches,
        fn_constructor_kwargs={"options": worker},
        batch_format="pyarrow",
        batch_size=batch_size,
        zero_copy_batch=True,
        compute=ray.data.ActorPoolStrategy(size=workers),
        num_cpus=_actor_cpus(workers, cpus_per_worker),
        num_gpus=gpus_per_worker,
        # Only map_batches' named parameters: anything else lands in
        # **ray_remote_args, which Ray 2.60 deprecates and 2.64 removes.
        # Restarts need no argument: Ray Data creates actor-pool actors with
        # max_restarts=-1 and max_task_retries=-1 (Ray 2.50 to 2.60 at
        # least), so an actor that dies (OOM kill, kill -9, lost node) is
        # restarted and its batches run again; a RefscoreError (bad data or
        # options) is a user error, not retried: it would fail the same way.
    )


class _ShardJob:
    """One actor of the shard pool: runs whole CLI jobs, ``--shard K/S
    --resume``, so an interrupted shard continues from its last commit."""

    def __init__(self, input: str, outdir: str, shards: int, flags: List[str], threads: int):
        self.input, self.outdir, self.shards = input, outdir, shards
        self.flags, self.threads = flags, threads

    def __call__(self, batch):
        import pyarrow as pa

        outcomes = [_shards.run_shard(self.input, self.outdir, k, self.shards, self.flags, self.threads)
                    for k in batch.column("shard").to_pylist()]
        return pa.Table.from_pylist(outcomes, schema=pa.schema(
            [("shard", pa.int64()), ("rows", pa.int64()), ("code", pa.int64()), ("message", pa.string())]))


def run(input: str, outdir: str, *, workers: int, flags: List[str], shards: Optional[int] = None,
        cpus_per_worker: float = 1, gpus_per_worker: float = 0) -> Dict[str, Any]:
    """The ``python -m refscore.ray`` job; returns the merged summary."""
    _shards.check_flags(flags)
    shards = _shards.begin(input, outdir, flags, shards, workers, "refscore-ray.json")
    if gpus_per_worker and "--device" not in flags:
        flags = [*flags, "--device", "cuda"]
    threads = max(1, int(cpus_per_worker))
    ds = ray.data.from_items([{"shard": k} for k in range(1, shards + 1)])
    outcomes = ds.map_batches(
        _ShardJob,
        fn_constructor_kwargs=dict(input=_shards.input_location(input), outdir=os.path.abspath(outdir), shards=shards,
                                   flags=flags, threads=threads),
        batch_format="pyarrow",
        batch_size=1,
        compute=ray.data.ActorPoolStrategy(size=workers, max_tasks_in_flight_per_actor=1),
        num_cpus=cpus_per_worker,
        num_gpus=gpus_per_worker,
        # Restarted on death by Ray Data's own actor-pool defaults (see score).
    ).take_all()
    return _shards.finish(outdir, shards, outcomes)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m refscore.ray",
        description="Score a Parquet dataset on a Ray cluster: the refscore CLI's job in shards, one per "
                    "worker by default. Any other option is a `refscore score` option (--metrics, --model, ...). "
                    "Re-running the same command after a failure finishes only what is missing.",
    )
    parser.add_argument("input", help="a Parquet file, a directory of them, or a quoted glob, on storage every node sees; or an s3://, gs://, az:// or https:// URL, or a Delta table")
    parser.add_argument("-o", "--output", required=True, metavar="OUTDIR",
                        help="folder for the part files (part-K-of-S.parquet) and summary.json")
    parser.add_argument("--workers", type=int, required=True, help="scoring actors (processes) across the cluster")
    parser.add_argument("--cpus-per-worker", type=float, default=1, help="CPUs (and threads) per worker [1]")
    parser.add_argument("--gpus-per-worker", type=float, default=0,
                        help="GPUs per worker [0]; with GPUs the encoder runs on --device cuda")
    parser.add_argument("--shards", type=int, help="parts to cut the input into [--workers]; fixed by the first run")
    parser.add_argument("--address", help="Ray cluster to join [RAY_ADDRESS, else a local cluster]")
    args, flags = parser.parse_known_args(argv)
    ray.init(address=args.address, log_to_driver=False)
    return _shards.main_exit(
        lambda: run(args.input, args.output, workers=args.workers, flags=flags, shards=args.shards,
                    cpus_per_worker=args.cpus_per_worker, gpus_per_worker=args.gpus_per_worker), args.output)


if __name__ == "__main__":
    # Through the importable module, so Ray ships its classes by reference.
    from refscore.ray import main as _main

    sys.exit(_main())
