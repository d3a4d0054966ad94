"""A scripted OpenAI-style judge on 127.0.0.1 for the Python tests: each
request's answer comes from a function of its last message, and the server
records every message and when it came."""

import http.server
import json
import threading
import time
from typing import Callable


class ScriptedJudge:
    """Serves ``/v1/chat/completions`` until :meth:`close`; ``answer(user)``
    gives the reply's content for the request's last message."""

    def __init__(self, answer: Callable[[str], str]):
        self.times = []
        self.prompts = []
        lock = threading.Lock()
        judge = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                user = body["messages"][-1]["content"]
                with lock:
                    judge.times.append(time.monotonic())
                    judge.prompts.append(user)
                reply = {"choices": [{"index": 0, "message": {"role": "assistant", "content": answer(user)}}],
                         "usage": {"prompt_tokens": 5, "completion_tokens": 5}}
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"

    def close(self):
        self.server.shutdown()
