#!/usr/bin/env python3
"""The online judge client at scale: `refscore score --metrics meaning_match`
against a scripted OpenAI-compatible server on 127.0.0.1 that answers every
request after a fixed latency (default 200 ms), with as many connections
open at once as the client makes.

Per setting it reports judged rows/s against the ceiling concurrency /
latency (the issue's goal: at least 80% of it), and the client's CPU per
judged row (user + system seconds of the refscore process over judged rows,
reading and writing included). With --rpm it also checks that
`--judge-rpm` holds: after the first minute's budget (GCRA lets a whole
minute's requests go at once), requests arrive at RPM/60 per second. With
--tpm it checks `--judge-tpm` the same way over tokens: the client budgets a
request before sending it by its estimate (UTF-8 bytes of the system and
user messages / 4, plus max_tokens), which the server recomputes from each
body it receives.

Usage (from the repository root, after a release build):
  python scripts/bench/judge-client.py [--bin target/release/refscore]
      [--rows 4096] [--latency 0.2] [--concurrency 64,256] [--batch-size auto,1024]
      [--rpm 600 --rpm-seconds 20] [--tpm 60000 --tpm-seconds 20] [--json results.json]
Needs pyarrow (the test venv has it). Prints a markdown table.
"""

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq

ANSWER = json.dumps({
    "choices": [{"index": 0, "message": {"role": "assistant",
                                         "content": '{"meaning_match": true, "reason": "scripted"}'}}],
    "usage": {"prompt_tokens": 200, "completion_tokens": 8},
}).encode()


class Server:
    """An HTTP/1.1 server (keep-alive) on its own event loop thread: every
    POST is answered after `latency` seconds; arrival times are kept."""

    def __init__(self, latency):
        self.latency = latency
        self.arrivals = []
        self.estimates = []
        self.open_now = 0
        self.most_open = 0
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        ready.wait()

    def _run(self, ready):
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=1024))
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()

    async def _serve(self, reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                close = False
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                    if name.strip().lower() == b"connection" and value.strip().lower() == b"close":
                        close = True
                body = await reader.readexactly(length) if length else b""
                self.arrivals.append(time.monotonic())
                self.estimates.append(estimate(body))
                self.open_now += 1
                self.most_open = max(self.most_open, self.open_now)
                await asyncio.sleep(self.latency)
                self.open_now -= 1
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(ANSWER)).encode() + b"\r\n\r\n" + ANSWER)
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def url(self):
        return f"http://127.0.0.1:{self.port}/v1"

    def reset(self):
        self.arrivals = []
        self.estimates = []
        self.most_open = 0


def estimate(body):
    """The tokens refscore's limiter budgets for a request: UTF-8 bytes of
    its system and user messages over 4, plus max_tokens."""
    try:
        b = json.loads(body)
        messages = b["messages"]
        size = len(messages[0]["content"].encode()) + len(messages[1]["content"].encode())
        return size // 4 + int(b["max_tokens"])
    except (ValueError, KeyError, IndexError, TypeError):
        return 0


def budget_check(arrivals, costs, per_minute):
    """Under GCRA with a minute's burst, by time x after the first request
    at most per_minute + per_minute/60 * x is spent: the largest amount any
    arrival was ahead of that."""
    pairs = sorted(zip(arrivals, costs))
    t0, spent, excess = pairs[0][0], 0, float("-inf")
    for x, c in pairs:
        spent += c
        excess = max(excess, spent - (per_minute + per_minute / 60 * (x - t0)))
    return excess, pairs[-1][0] - t0, spent


def make_input(path, rows):
    # Different reference and output texts: no rule decides, every row is judged.
    pq.write_table(pa.table({
        "id": [f"r{i}" for i in range(rows)],
        "question": [f"Question number {i}?" for i in range(rows)],
        "reference": [f"The reference answer {i}" for i in range(rows)],
        "output": [f"A different candidate reply {i}" for i in range(rows)],
    }), path)


def run(bin_, inp, out, server, concurrency, batch_size, extra=()):
    args = [bin_, "score", inp, "-o", out, "--overwrite", "--quiet", "--metrics", "meaning_match",
            "--judge-url", server.url(), "--judge-model", "scripted", "--judge-reasons", "never",
            "--judge-concurrency", str(concurrency), "--judge-timeout", "30", *extra]
    if batch_size != "auto":
        args += ["--batch-size", str(batch_size)]
    server.reset()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    subprocess.run(args, check=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    summary = json.load(open(out + ".summary.json"))
    judged = summary["judge"]["rows_judged"]
    return {"wall_s": wall, "cpu_s": cpu, "judged": judged, "requests": len(server.arrivals),
            "most_open": server.most_open, "batch_size": batch_size, "concurrency": concurrency}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/release/refscore")
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--concurrency", default="64,256")
    ap.add_argument("--batch-size", default="auto,1024")
    ap.add_argument("--rpm", type=int, default=0)
    ap.add_argument("--rpm-seconds", type=float, default=20.0)
    ap.add_argument("--tpm", type=int, default=0)
    ap.add_argument("--tpm-seconds", type=float, default=20.0)
    ap.add_argument("--json")
    a = ap.parse_args()
    server = Server(a.latency)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        inp = os.path.join(tmp, "in.parquet")
        out = os.path.join(tmp, "out.parquet")
        make_input(inp, a.rows)
        print("| concurrency | batch size | rows | wall s | judged rows/s | ceiling c/latency | share | most open | client CPU ms/row |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for c in [int(x) for x in a.concurrency.split(",")]:
            for b in a.batch_size.split(","):
                r = run(a.bin, inp, out, server, c, b)
                ceiling = c / a.latency
                r["rows_per_s"] = r["judged"] / r["wall_s"]
                r["share"] = r["rows_per_s"] / ceiling
                r["cpu_ms_per_row"] = 1000 * r["cpu_s"] / r["judged"]
                results.append(r)
                print(f"| {c} | {b} | {r['judged']} | {r['wall_s']:.2f} | {r['rows_per_s']:.0f} | {ceiling:.0f} "
                      f"| {100 * r['share']:.0f}% | {r['most_open']} | {r['cpu_ms_per_row']:.3f} |")
        if a.rpm:
            # Enough rows to outlast the first minute's burst by rpm-seconds.
            rows = a.rpm + int(a.rpm / 60 * a.rpm_seconds)
            make_input(inp, rows)
            r = run(a.bin, inp, out, server, 256, 1024, ["--judge-rpm", str(a.rpm)])
            t = sorted(server.arrivals)
            # GCRA: a whole minute's budget at once, then RPM/60 per second;
            # by time x after the first request at most RPM + rate * x.
            rate = a.rpm / 60
            excess = max(i + 1 - (a.rpm + rate * (x - t[0])) for i, x in enumerate(t))
            span = t[-1] - t[0]
            r.update({"rpm": a.rpm, "requests_seen": len(t), "span_s": span,
                      "allowed_by_end": a.rpm + rate * span, "largest_excess": excess})
            results.append(r)
            print(f"\n--judge-rpm {a.rpm}: {len(t)} requests over {span:.2f} s (the first {a.rpm} within "
                  f"{t[a.rpm - 1] - t[0]:.2f} s); the budget allows {a.rpm + rate * span:.1f} by the last; "
                  f"most requests ever ahead of the budget: {excess:.2f}")
        if a.tpm:
            # Rows enough to outlast the first minute's token burst.
            probe_rows = 64
            make_input(inp, probe_rows)
            run(a.bin, inp, out, server, 4, "auto")
            per_request = sum(server.estimates) / len(server.estimates)
            rows = int((a.tpm + a.tpm / 60 * a.tpm_seconds) / per_request)
            make_input(inp, rows)
            r = run(a.bin, inp, out, server, 256, 1024, ["--judge-tpm", str(a.tpm)])
            excess, span, spent = budget_check(server.arrivals, server.estimates, a.tpm)
            r.update({"tpm": a.tpm, "requests_seen": len(server.arrivals), "span_s": span,
                      "tokens_estimated": spent, "allowed_by_end": a.tpm + a.tpm / 60 * span,
                      "largest_excess_tokens": excess, "tokens_per_request": per_request})
            results.append(r)
            print(f"\n--judge-tpm {a.tpm}: {len(server.arrivals)} requests of ~{per_request:.0f} estimated "
                  f"tokens over {span:.2f} s, {spent} tokens in all; the budget allows "
                  f"{a.tpm + a.tpm / 60 * span:.0f} by the last; most tokens ever ahead of the "
                  f"budget: {excess:.0f} (negative: always within)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
