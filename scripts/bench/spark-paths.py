"""Rows/s of the same scoring through the CLI and refscore.spark, on the
same generated files and machine, in one run: the job mode
(`python -m refscore.spark`) and `refscore.spark.score(df)` written back to
Parquet, each on a standalone cluster on 127.0.0.1 with 1 and then 2
executors of one core. The Spark figures are end to end (driver and
executor start-up, model loading, reading and writing included), so
"overhead/row" = (Spark seconds - CLI seconds) / rows; the first case, on
618 rows, shows the fixed part of it.

    scripts/bench/python.sh spark     # builds and installs, then runs this

Prints a Markdown table for docs/performance.md."""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "common"))
import spark_cluster  # noqa: E402
from refscore_scripts import DEFAULT_MODEL, REPO, write_example_copies  # noqa: E402

ROOT = Path(REPO)
BIN = os.environ.get("REFSCORE_BIN", str(ROOT / "target" / "release" / "refscore"))
MODEL = os.environ.get("REFSCORE_MODEL_DIR") or DEFAULT_MODEL

# score(df) from a fresh driver process, so its start-up counts as the job
# mode's does.
SCORE_DF = """
import sys
from pyspark.sql import SparkSession
import refscore.spark
master, cores, data, out = sys.argv[1:5]
options = eval(sys.argv[5])
spark = (SparkSession.builder.master(master).config("spark.cores.max", cores)
         .config("spark.ui.enabled", "false").getOrCreate())
df = spark.read.parquet(data)
refscore.spark.score(df, **options).write.mode("overwrite").parquet(out)
spark.stop()
"""


def timed(cmd) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main():
    tmp = Path(tempfile.mkdtemp(prefix="rs-bench-spark-"))
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    cases = [
        # Each path's fixed cost (JVMs, executors, Python workers, the
        # model), on the example's rows once per file.
        ("start-up: lexical", ["lexical"], {"metrics": ["lexical"]}, 1),
        ("lexical", ["lexical"], {"metrics": ["lexical"]},
         int(os.environ.get("BENCH_LEXICAL_COPIES", "1500"))),
        ("lexical + embedding", ["lexical", "embedding"],
         {"metrics": ["lexical", "embedding"], "model": MODEL}, int(os.environ.get("BENCH_EMBED_COPIES", "6"))),
    ]
    print("| metrics | rows | path | seconds | rows/s | vs CLI | overhead/row |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
    with spark_cluster.standalone(tmp / "cluster", workers=2, cores=1) as master:
        for name, metrics, options, copies in cases:
            data = tmp / "".join(c for c in name if c.isalnum())
            rows = write_example_copies(str(data), files=2, copies=copies, row_group_size=512)
            flags = ["--metrics", ",".join(metrics), "--input-col", "question"]
            if "model" in options:
                flags += ["--model", MODEL]
            options = {**options, "input_col": "question"}
            runs = [("CLI (`refscore score`, 2 threads)",
                     [BIN, "score", str(data), "-o", str(tmp / "cli.parquet"), "--overwrite", "--quiet", *flags])]
            for executors in (1, 2):
                runs.append((f"`python -m refscore.spark`, {executors} executor(s)",
                             [sys.executable, "-m", "refscore.spark", str(data), "-o", str(data) + f".job{executors}",
                              "--master", master, "--conf", f"spark.cores.max={executors}",
                              "--shards", str(executors), *flags]))
                runs.append((f"`refscore.spark.score(df)`, {executors} executor(s)",
                             [sys.executable, "-c", SCORE_DF, master, str(executors), str(data),
                              str(data) + f".df{executors}", repr(options)]))
            cli = None
            for path, cmd in runs:
                seconds = timed(cmd)
                cli = cli or seconds
                overhead = "" if seconds is cli else f"{(seconds - cli) / rows * 1e6:.0f} µs"
                print(f"| {name} | {rows:,} | {path} | {seconds:.2f} | {rows / seconds:,.0f} | "
                      f"{cli / seconds:.2f} | {overhead} |", flush=True)


if __name__ == "__main__":
    main()
