"""A real reward server on 127.0.0.1 (a port of its own, in a thread) whose answers a test
controls, for the remote reward (``roles.rewards.learned.remote``).

``ScoreServer(answer)`` calls ``answer(server, items, index)`` for every POST, where ``items``
is the request's item list and ``index`` counts requests from 0. It returns ``(status, body)``
with ``body`` bytes or anything JSON can write; ``HANG`` to hold the request until the server
stops; or a function that writes the raw reply to the request's handler. The server records
each request's items and headers, and the most requests it held at once.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HANG = object()


def scores_of(items, score: Callable[[dict], float | None]) -> tuple[int, dict]:
    return 200, {"scores": [score(item) for item in items]}


def length_scores(server, items, index):
    """Each response's length: an answer a test can check item by item."""
    return scores_of(items, lambda item: float(len(item["response"])))


class ScoreServer:
    def __init__(self, answer=length_scores, delay_s: float = 0.0):
        self.answer = answer
        self.delay_s = delay_s  # every request waits this long first (to see concurrency)
        self.requests: list[list[dict]] = []  # each request's items, in arrival order
        self.headers: list[dict] = []  # each request's headers
        self.in_flight = self.max_in_flight = 0
        self.released = threading.Event()  # set on stop: hung requests end
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/score"

    def sizes(self) -> list[int]:
        return [len(items) for items in self.requests]

    def stop(self) -> None:
        """Stop listening (later connections are refused) and end every hung request."""
        self.released.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def _respond(self, handler: BaseHTTPRequestHandler) -> None:
        payload = json.loads(handler.rfile.read(int(handler.headers["Content-Length"])))
        items = payload["items"]
        with self._lock:
            index = len(self.requests)
            self.requests.append(items)
            self.headers.append(dict(handler.headers))
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            time.sleep(self.delay_s)
            reply = self.answer(self, items, index)
            if reply is HANG:
                self.released.wait(60)
                return
            if callable(reply):  # writes the raw reply itself (a server that trickles bytes)
                reply(handler)
                return
            status, body = reply
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        finally:
            with self._lock:
                self.in_flight -= 1

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                server._respond(self)

            def log_message(self, *args):  # quiet: the tests read what they need
                pass

        return Handler
