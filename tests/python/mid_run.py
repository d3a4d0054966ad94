"""Killing a worker in the middle of a sharded job, for the Ray and Spark
tests: once a shard has committed progress, kill -9 the first process a
predicate picks out."""

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, List, Optional


def processes(match: Callable[[Path], bool]) -> List[int]:
    """Pids of the running processes whose /proc folder `match` accepts."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if match(proc):
                    pids.append(int(proc.name))
            except OSError:  # it ended while being read
                continue
    return pids


def kill_after_first_commit(driver: subprocess.Popen, out: Path, match: Callable[[Path], bool],
                            timeout: float = 120) -> Optional[int]:
    """Waits until a shard of the job writing into `out` has committed a
    part, then kill -9s the first process `match` accepts; returns its pid,
    or None when the job ended (or `timeout` passed) first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and driver.poll() is None:
        if list(out.glob(".part-*.refscore-run/part-*.parquet")):
            pids = processes(match)
            if pids:
                os.kill(pids[0], signal.SIGKILL)
                return pids[0]
        time.sleep(0.05)
    return None
