"""The job mode that ``refscore.ray`` and ``refscore.spark`` share: the CLI's
own ``score`` job cut into S shards (``--shard K/S --resume``), one result
part per shard, and the parts' summaries merged. Whatever runs the shards
(Ray actors, Spark tasks) only calls :func:`run_shard`; the folder's state,
the parts' names, the outcome and the merge are here, once."""

import json
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence

from . import _native
from ._errors import CONFIG, TEMPORARY, USAGE, RefscoreError

#: Flags the job mode sets itself for each shard.
_OWN_FLAGS = ("-o", "--output", "--shard", "--resume")


def input_location(input: str) -> str:
    """INPUT as every worker must see it: a local path made absolute; an
    object-store URL (s3://, gs://, az://, https://) as it is."""
    scheme, sep, _ = input.partition("://")
    if sep and scheme.replace("+", "").replace("-", "").replace(".", "").isalnum() and scheme != "file":
        return input
    return os.path.abspath(input)


def part_path(outdir: str, k: int, shards: int) -> str:
    """Where shard ``k`` of ``shards`` writes its result."""
    return os.path.join(outdir, f"part-{k:05d}-of-{shards:05d}.parquet")


def check_flags(flags: Sequence[str]) -> None:
    """Refuses the flags the job mode sets for each shard itself."""
    for flag in flags:
        name = flag.split("=", 1)[0]
        if name == "--output-format":
            raise RefscoreError(
                "--output-format: the job writes one Parquet file per shard in OUTDIR; to append a run to a "
                "Delta table, run `refscore score ... --output-format delta` (score_parquet(..., "
                "output_format=\"delta\"))", USAGE)
        if name in _OWN_FLAGS:
            raise RefscoreError(
                f"{name}: set by the job for each shard (OUTDIR/part-K-of-S.parquet, --shard K/S --resume); "
                f"leave it out", USAGE)


def begin(input: str, outdir: str, flags: List[str], shards: Optional[int], default_shards: int,
          state_name: str) -> int:
    """Creates OUTDIR (or checks the run it holds: the same input and
    options, the same number of shards) and returns the number of shards.
    A re-run keeps the first run's shards, so finished parts stay valid."""
    os.makedirs(outdir, exist_ok=True)
    state_path = os.path.join(outdir, state_name)
    state = {"input": input_location(input), "flags": list(flags)}
    if os.path.exists(state_path):
        with open(state_path) as f:
            before = json.load(f)
        if shards is not None and shards != before["shards"]:
            raise RefscoreError(
                f"{outdir}: an earlier run cut the input into {before['shards']} shards; a re-run keeps them "
                f"(drop --shards, or use a new OUTDIR)", CONFIG)
        if {k: before.get(k) for k in state} != state:
            raise RefscoreError(
                f"{outdir}: holds a run with another input or options; use a new OUTDIR", CONFIG)
        return int(before["shards"])
    shards = shards or default_shards
    if shards < 1:
        raise RefscoreError(f"--shards {shards}: expected at least 1", USAGE)
    tmp = state_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({**state, "shards": shards}, f)
    os.replace(tmp, state_path)
    return shards


def run_shard(input: str, outdir: str, k: int, shards: int, flags: Sequence[str], threads: int) -> Dict[str, Any]:
    """Runs shard ``k`` as the CLI would (``--resume``: a finished part is
    skipped, an interrupted one continues from its last commit) and returns
    ``{"shard", "rows", "code", "message"}``. A refscore error is returned,
    not raised: it would fail the same way again, so the cluster must not
    retry it; only a lost process is retried, and resumes."""
    args = [input, "-o", part_path(outdir, k, shards), "--shard", f"{k}/{shards}", "--resume", "--quiet", *flags]
    if "--threads" not in flags and not any(f.startswith("--threads=") for f in flags):
        args += ["--threads", str(threads)]
    try:
        summary = json.loads(_native.score_parquet(args))
    except RefscoreError as e:
        return {"shard": k, "rows": 0, "code": e.exit_code, "message": e.message}
    return {"shard": k, "rows": int(summary.get("rows", 0)), "code": 0, "message": None}


def finish(outdir: str, shards: int, outcomes: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """Raises the shards' first error (a shard's own message and exit code;
    75 when shards only wait, for a judge batch or a judge that was down,
    and the same command finishes them later), else merges the parts'
    summaries into OUTDIR/summary.json and returns it."""
    failed = sorted((o for o in outcomes if o["code"]), key=lambda o: o["shard"])
    hard = [o for o in failed if o["code"] != TEMPORARY]
    if failed:
        first = (hard or failed)[0]
        more = f" ({len(failed) - 1} more shards did not finish)" if len(failed) > 1 else ""
        again = "" if hard else "; run the same command again to go on"
        raise RefscoreError(f"shard {first['shard']}/{shards}: {first['message']}{more}{again}", first["code"])
    summaries = [part_path(outdir, k, shards) + ".summary.json" for k in range(1, shards + 1)]
    merged = os.path.join(outdir, "summary.json")
    code = _native.main(["refscore", "merge-summaries", *summaries, "-o", merged, "--quiet"])
    if code != 0:
        raise RefscoreError(f"{outdir}: merging the shards' summaries failed (exit {code})", code)
    with open(merged) as f:
        return json.load(f)


def main_exit(job: Callable[[], Dict[str, Any]], outdir: str) -> int:
    """Runs a job mode's ``run`` for its ``python -m`` command: prints the
    rows scored, or the error as the CLI does; returns the exit code."""
    try:
        summary = job()
    except RefscoreError as e:
        print(f"refscore: error: {e}", file=sys.stderr)
        return e.exit_code
    print(f"scored {summary.get('rows', 0)} rows into {outdir} (summary: {os.path.join(outdir, 'summary.json')})")
    return 0
