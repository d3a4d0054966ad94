"""Rows/s of the same scoring through the CLI, refscore.Scorer.score and the
Ray paths (refscore.ray.score on a Ray Dataset; the `python -m refscore.ray`
shard job), on the same generated file and machine, in one run.

    scripts/bench/python.sh            # builds and installs, then runs this

Prints a Markdown table for docs/performance.md."""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "common"))
from refscore_scripts import DEFAULT_MODEL, REPO, write_example_copies  # noqa: E402

ROOT = Path(REPO)
BIN = os.environ.get("REFSCORE_BIN", str(ROOT / "target" / "release" / "refscore"))
MODEL = os.environ.get("REFSCORE_MODEL_DIR") or DEFAULT_MODEL


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main():
    import ray
    import refscore
    import refscore.ray

    tmp = Path(tempfile.mkdtemp(prefix="rs-bench-"))
    cases = [
        ("lexical", ["lexical"], int(os.environ.get("BENCH_LEXICAL_COPIES", "3000"))),
        ("lexical + embedding", ["lexical", "embedding"], int(os.environ.get("BENCH_EMBED_COPIES", "12"))),
    ]
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
             _temp_dir=tempfile.mkdtemp(prefix="rs-ray-", dir="/tmp"))
    ray.data.DataContext.get_current().enable_progress_bars = False
    rows_out = []
    for name, metrics, copies in cases:
        # One file, so Ray's parallelism comes from its row groups.
        data = tmp / name.replace(' ', '')
        rows = write_example_copies(str(data), files=1, copies=copies, row_group_size=512)
        options = dict(metrics=metrics, input_col="question", model=MODEL)
        flags = ["--metrics", ",".join(metrics), "--input-col", "question", "--model", MODEL]
        cli = timed(lambda: subprocess.run([BIN, "score", str(data), "-o", str(tmp / "cli.parquet"), "--quiet",
                                            "--overwrite", *flags], check=True))
        scorer = refscore.Scorer(**options)  # model loaded once, outside the timing
        py = timed(lambda: scorer.score(pq.read_table(data)))
        ds_time = timed(lambda: refscore.ray.score(ray.data.read_parquet(str(data), override_num_blocks=8), workers=2, **options)
                        .materialize())
        outdir = tmp / f"ray-{name.replace(' ', '')}"
        shard_time = timed(lambda: refscore.ray.run(str(data), str(outdir), workers=2, flags=flags))
        for path, secs in [("CLI (`refscore score`, 2 threads)", cli),
                           ("`Scorer.score(pq.read_table(f))`", py),
                           ("`refscore.ray.score(ds)`, 2 workers × 1 CPU", ds_time),
                           ("`python -m refscore.ray`, 2 workers × 1 CPU", shard_time)]:
            rows_out.append((name, rows, path, secs, rows / secs, rows / secs / (rows / cli)))
    ray.shutdown()
    print("| metrics | rows | path | seconds | rows/s | vs CLI |")
    print("| --- | ---: | --- | ---: | ---: | ---: |")
    for name, rows, path, secs, rate, rel in rows_out:
        print(f"| {name} | {rows:,} | {path} | {secs:.2f} | {rate:,.0f} | {rel:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
