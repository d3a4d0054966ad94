#!/usr/bin/env python3
"""Answers refscore's judge request files (`--judge-batch dir:PATH`) through any
OpenAI-compatible chat-completions endpoint, the way `vllm run-batch` would:
for each PATH/requests-NNN.jsonl without a PATH/results-NNN.jsonl, every
request line's body is POSTed to URL/chat/completions and one result line per
request is written, in the Batch API's output format:

  {"id": ..., "custom_id": ..., "response": {"status_code": 200,
   "request_id": ..., "body": <chat completion>}, "error": null}

A request the server refuses gets its status code and error body; one it
cannot reach gets an `error` object. The results file is written under a
temporary name and renamed, so refscore never reads half of one.

For an air-gapped box whose judge is llama.cpp's llama-server (or anything
without a batch runner), and for refscore's own measurements. Standard
library only.

Usage:
  python scripts/tools/answer-batch-dir.py --judge-url http://127.0.0.1:8080/v1 \
      --dir PATH [--concurrency 2] [--api-key-env OPENAI_API_KEY]
"""

import argparse
import concurrent.futures
import json
import os
import sys
import urllib.error
import urllib.request


def answer(url, key, line, timeout):
    request = json.loads(line)
    data = json.dumps(request["body"]).encode()
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(url, data=data, headers=headers, method="POST")
    out = {"id": f"local-{request['custom_id'][:16]}", "custom_id": request["custom_id"]}
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = json.loads(resp.read())
        out.update(response={"status_code": 200, "request_id": out["id"], "body": body}, error=None)
    except urllib.error.HTTPError as e:
        text = e.read().decode("utf-8", "replace")
        try:
            body = json.loads(text)
        except ValueError:
            body = {"error": {"message": text}}
        out.update(response={"status_code": e.code, "request_id": out["id"], "body": body}, error=None)
    except (urllib.error.URLError, OSError) as e:
        out.update(response=None, error={"code": "unreachable", "message": str(e)})
    return json.dumps(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--judge-url", required=True, help="base URL, e.g. http://127.0.0.1:8080/v1")
    ap.add_argument("--dir", required=True)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--api-key-env", default="OPENAI_API_KEY")
    args = ap.parse_args()
    url = args.judge_url.rstrip("/") + "/chat/completions"
    key = os.environ.get(args.api_key_env, "").strip() or None
    names = sorted(n for n in os.listdir(args.dir) if n.startswith("requests-") and n.endswith(".jsonl"))
    for name in names:
        results = os.path.join(args.dir, name.replace("requests-", "results-", 1))
        if os.path.exists(results):
            continue
        with open(os.path.join(args.dir, name), encoding="utf-8") as f:
            lines = [l for l in f if l.strip()]
        with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
            out = list(pool.map(lambda l: answer(url, key, l, args.timeout), lines))
        temp = results + ".partial"
        with open(temp, "w", encoding="utf-8") as f:
            f.write("".join(o + "\n" for o in out))
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, results)
        print(f"answered {name}: {len(out)} requests -> {os.path.basename(results)}", file=sys.stderr)


if __name__ == "__main__":
    main()
