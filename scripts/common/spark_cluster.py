"""A Spark standalone cluster on 127.0.0.1 (a master and N workers, from the
pyspark package's own jars), for refscore.spark's tests and benchmark.

    with standalone(workdir, workers=2) as url:   # "spark://127.0.0.1:PORT"
        ...

Every JVM it starts (and the executors and Python workers those start) ends
with the block. Needs pyspark and Java 17+; nothing leaves loopback."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@contextlib.contextmanager
def standalone(workdir: Path, workers: int = 2, cores: int = 1, memory: str = "2g",
               timeout: float = 60) -> Iterator[str]:
    """Starts the master and `workers` workers of `cores` cores each, waits
    until every worker has registered, and yields the master's URL."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOG_DIR": str(workdir),
           "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1"}
    spark_class = str(spark_home() / "bin" / "spark-class")
    url = f"spark://127.0.0.1:{port}"
    master_log = workdir / "master.log"

    def start(args: list, log: Path) -> subprocess.Popen:
        with open(log, "w") as out:
            # Its own session: the block's end stops the JVM and whatever it started.
            return subprocess.Popen([spark_class, *args], env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)

    procs = [start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                    "--webui-port", str(free_port())], master_log)]
    try:
        for i in range(workers):
            procs.append(start(["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores",
                                str(cores), "--memory", memory, "--webui-port", str(free_port()), "--work-dir",
                                str(workdir / f"worker{i}"), url], workdir / f"worker{i}.log"))
        deadline = time.monotonic() + timeout
        while master_log.read_text().count("Registering worker") < workers:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the standalone cluster did not start:\n{master_log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield url
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
