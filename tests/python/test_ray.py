"""refscore.ray on a local Ray cluster started here, bound to 127.0.0.1, with
2 workers: a multi-file input scored through a Ray Dataset and through
`python -m refscore.ray` equals the CLI's output by id, every row exactly
once, also after kill -9 of a worker in the middle of the run."""

import json
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

if not os.environ.get("REFSCORE_REQUIRE_PACKAGE"):
    pytest.importorskip("refscore")
    pytest.importorskip("ray")
import ray  # noqa: E402

import refscore  # noqa: E402
import refscore.ray  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "common"))
from refscore_scripts import write_example_copies  # noqa: E402
from mid_run import kill_after_first_commit  # noqa: E402

BIN = os.environ.get("REFSCORE_BIN", str(ROOT / "target" / "release" / "refscore"))
EXAMPLE = ROOT / "examples" / "qa.parquet"
MODEL = os.environ.get("REFSCORE_MODEL_DIR") or str(ROOT / "models" / "all-MiniLM-L6-v2")


@pytest.fixture(scope="module")
def cluster():
    # Commit progress often, so a worker killed after a second has committed
    # parts to resume from (the workers inherit this environment).
    os.environ["REFSCORE_COMMIT_SECONDS"] = "0.05,0.5"
    # A short folder: Ray's socket paths must fit in 107 bytes.
    tmp = tempfile.mkdtemp(prefix="rs-ray-", dir="/tmp")
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", _temp_dir=tmp,
             log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def make_input(folder: Path, files: int, copies: int) -> Path:
    """The example rows, distinct copies, row groups of 100 (scripts/common)."""
    write_example_copies(str(folder), files=files, copies=copies, row_group_size=100)
    return folder


def cli_by_id(tmp: Path, data: Path, *flags) -> dict:
    out = tmp / "cli.parquet"
    subprocess.run([BIN, "score", str(data), "-o", str(out), "--quiet", "--overwrite", *flags], check=True)
    return by_id(pq.read_table(out))


def by_id(table: pa.Table) -> dict:
    rows = table.to_pylist()
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), "a row came out twice"
    return {r["id"]: r for r in rows}


def test_ray_dataset_and_module_equal_cli(cluster, tmp_path):
    data = make_input(tmp_path / "in", files=3, copies=2)
    flags = ["--metrics", "lexical", "--input-col", "question"]
    want = cli_by_id(tmp_path, data, *flags)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = refscore.ray.score(ray.data.read_parquet(str(data)), workers=2, metrics=["lexical"], input_col="question")
    # map_batches' **ray_remote_args is deprecated (removed in Ray 2.64):
    # refscore passes only its named parameters.
    assert not [w for w in caught if "ray_remote_args" in str(w.message)], [str(w.message) for w in caught]
    got = by_id(pa.concat_tables(ray.get(ds.to_arrow_refs())))
    assert got == want

    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "refscore.ray", str(data), "-o", str(out), "--workers", "2",
                          "--address", cluster, *flags], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ray_remote_args" not in run.stderr, run.stderr[-3000:]
    parts = sorted(out.glob("part-*.parquet"))
    assert len(parts) == 2
    assert by_id(pa.concat_tables(pq.read_table(p) for p in parts)) == want
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rows"] == len(want)
    # A re-run finds every shard complete and redoes nothing.
    again = subprocess.run([sys.executable, "-m", "refscore.ray", str(data), "-o", str(out), "--workers", "2",
                            "--address", cluster, *flags], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert [p.stat().st_mtime_ns for p in parts] == [p.stat().st_mtime_ns for p in sorted(out.glob("part-*.parquet"))]


def shard_worker(proc: Path) -> bool:
    """A process running a shard job: Ray Data runs the class inside its own
    actor, titled "ray::MapWorker(MapBatches(_ShardJob))"."""
    cmd = (proc / "cmdline").read_bytes()
    return cmd.startswith(b"ray::") and b"_ShardJob" in cmd


def test_kill_9_of_a_worker_mid_run_still_scores_every_row_once(cluster, tmp_path):
    data = make_input(tmp_path / "in", files=2, copies=3)
    flags = ["--metrics", "lexical,cosine", "--input-col", "question", "--model", MODEL, "--batch-size", "100"]
    want = cli_by_id(tmp_path, data, *flags)
    out = tmp_path / "out"
    driver = subprocess.Popen([sys.executable, "-m", "refscore.ray", str(data), "-o", str(out), "--workers", "2",
                               "--address", cluster, *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    killed = kill_after_first_commit(driver, out, shard_worker)
    stdout, stderr = driver.communicate(timeout=300)
    assert killed is not None, "the run ended before a worker could be killed"
    assert driver.returncode == 0, stderr[-3000:]
    got = by_id(pa.concat_tables(pq.read_table(p) for p in sorted(out.glob("part-*.parquet"))))
    assert got.keys() == want.keys()
    for k, row in want.items():
        for col, v in row.items():
            g = got[k][col]
            assert g == v or (isinstance(v, float) and abs(g - v) <= 1e-6), (k, col, g, v)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rows"] == len(want)
