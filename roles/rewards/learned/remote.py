"""Scores from the user's own HTTP server (``reward: {name: http, url: ...}``).

Wire protocol. Each request is ``POST <url>`` with ``Content-Type: application/json`` and
the body ``{"items": [item, ...]}`` (at most ``batch_size`` items), where an item is
``{"prompt": str, "messages": [{"role": ..., "content": ...}, ...], "response": str,
"answer": str, "metadata": {...}}``: the prompt as the policy saw it (its chat template
applied), the same prompt as chat messages, the decoded response, the task's reference
answer and the example's metadata. The server answers ``200`` with ``{"scores": [...]}``, one
entry per item in order: a number, or ``null`` for an item it did not score (scored 0,
counted under ``<label>/unscored``). Any other answer fails the whole batch: a status other
than 2xx, a body that is not that JSON, a list of another length, an entry that is not a
finite number or null. A timeout, a lost connection, a 5xx, 408 or 429 are retried
(``retries`` times, after ``backoff_s * 2**k`` seconds with jitter); the rest are not. A
failed batch's items score 0 and are counted (``<label>/failed``; ``<label>/timed_out`` when
its last try ran out of time).

Bounds: each try is cut at ``request_timeout_s`` whatever the server does (its socket is shut
when the time is up); at most ``concurrency`` requests are in flight. When no request has
succeeded for ``give_up_after_s`` while requests keep failing, the scorer raises
``ScorerGaveUp`` and the job ends with that message instead of training on zeros for ever.
At start the rank opens a TCP connection to the server: one that cannot be reached within
``connect_timeout_s`` is an error naming ``reward.url``.

Headers are sent as written; ``${VAR}`` in a value is replaced by the environment variable
``VAR`` on the reward rank, so a secret never sits in the role map (a header that carries
one, such as ``Authorization``, must take it from the environment). Standard library only;
no proxy is used. This module knows nothing of tokens, tasks or ranks: it sends text.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import random
import re
import socket
import threading
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pydantic import ConfigDict, Field, field_validator

from roles.rewards.learned.base import LearnedConfig, LearnedReward, RawScore, ScoreItem, ScorerContext, ScorerGaveUp

RETRIED_STATUSES = frozenset({408, 429})  # and every 5xx: the server may answer a later try
MAX_REPLY_BYTES = 64 << 20  # a longer reply is refused as garbage rather than held in memory
MAX_BACKOFF_S = 60.0  # no single wait between tries is longer
ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP token (RFC 9110)
# Headers that carry credentials: their value must come from the environment.
SECRET_HEADER = re.compile(r"authorization|api[-_]?key|token|secret|cookie|password", re.IGNORECASE)


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str
    port: int
    path: str  # with its query

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def parse_url(url: str) -> Target:
    """The server's address, or a ``ValueError`` saying what is wrong with ``url``."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{url!r} is not an http:// or https:// URL")
    if not parts.hostname:
        raise ValueError(f"{url!r} names no host")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"{url!r} holds credentials: send them in a header from the environment (headers)")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{url!r} has a bad port") from None
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80), path)


class RemoteConfig(LearnedConfig):
    model_config = ConfigDict(hide_input_in_errors=True)  # a header's value may be a credential

    url: str  # http(s)://host[:port]/path the batches are POSTed to
    batch_size: int = Field(32, gt=0)  # items per request
    concurrency: int = Field(4, gt=0, le=256)  # requests in flight at once
    request_timeout_s: float = Field(60.0, gt=0)  # one try, from connecting to the last byte
    retries: int = Field(3, ge=0)  # further tries of a batch after a timeout, lost connection, 5xx
    backoff_s: float = Field(1.0, ge=0)  # wait before retry k: backoff_s * 2**k, times 0.5 to 1.5
    # No request answered for this long while requests keep failing: the job ends, named.
    # Keep it under run.stall_timeout_s, or the rank is ended as stuck first.
    give_up_after_s: float = Field(300.0, gt=0)
    connect_timeout_s: float = Field(5.0, gt=0)  # the reachability check at start
    headers: dict[str, str] = {}  # sent with every request; "${VAR}" is read from the environment

    @field_validator("url")
    @classmethod
    def _an_http_url(cls, url: str) -> str:
        parse_url(url)
        return url

    @field_validator("headers")
    @classmethod
    def _headers(cls, headers: dict[str, str]) -> dict[str, str]:
        for name, value in headers.items():
            if not HEADER_NAME.match(name):
                raise ValueError(f"{name!r} is not a header name")
            if "\r" in value or "\n" in value:
                raise ValueError(f"header {name!r}: a value cannot hold a line break")
            if SECRET_HEADER.search(name) and not ENV_REFERENCE.search(value):
                raise ValueError(
                    f"header {name!r} carries a credential: take it from the environment, e.g. "
                    f'"{name}: Bearer ${{REWARD_TOKEN}}", so the secret is not written in the role map'
                )
        return headers


def resolve_headers(headers: dict[str, str], environ=os.environ) -> dict[str, str]:
    """``headers`` with each ``${VAR}`` replaced by its value in ``environ``; an unset one is a
    ``ValueError`` naming the header and the variable (never a value)."""
    out = {}
    for name, value in headers.items():
        for var in ENV_REFERENCE.findall(value):
            if var not in environ:
                raise ValueError(f"reward.headers.{name}: the environment variable {var} is not set on the reward rank")
        out[name] = ENV_REFERENCE.sub(lambda m: environ[m.group(1)], value)
    return out


def check_reachable(target: Target, url: str, timeout_s: float) -> None:
    """A ``ConnectionError`` naming ``reward.url`` unless a TCP connection opens in time."""
    try:
        socket.create_connection((target.host, target.port), timeout=timeout_s).close()
    except OSError as e:
        raise ConnectionError(
            f"reward.url: cannot reach the reward server {url} at {target.address} "
            f"within {timeout_s:g} s (reward.connect_timeout_s): {e}"
        ) from None


def _plain(value: Any):
    """JSON for what json cannot write itself (numpy scalars and arrays, anything else as text)."""
    for method in ("tolist", "item"):
        if callable(getattr(value, method, None)):
            return getattr(value, method)()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def request_body(items: Sequence[ScoreItem]) -> bytes:
    rows = []
    for item in items:
        example = item.example
        rows.append(
            {
                "prompt": item.prompt,
                "messages": list(item.messages),
                "response": item.response,
                "answer": str(getattr(example, "answer", "") or ""),
                "metadata": dict(getattr(example, "metadata", None) or {}),
            }
        )
    return json.dumps({"items": rows}, default=_plain, ensure_ascii=False).encode()


class BadReply(ValueError):
    """A 2xx answer that is not ``{"scores": [...]}`` of the right length and kind."""


def parse_reply(body: bytes, n: int) -> list[float | None]:
    if len(body) > MAX_REPLY_BYTES:
        raise BadReply(f"a reply over {MAX_REPLY_BYTES} bytes")
    try:
        reply = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise BadReply(f"not JSON: {body[:80]!r}") from None
    scores = reply.get("scores") if isinstance(reply, dict) else None
    if not isinstance(scores, list):
        raise BadReply(f'no "scores" list in {body[:80]!r}')
    if len(scores) != n:
        raise BadReply(f"{len(scores)} scores for {n} items")
    out: list[float | None] = []
    for s in scores:
        if s is None:
            out.append(None)
        elif isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(_float(s)):
            out.append(float(s))
        else:
            raise BadReply(f"a score that is not a finite number or null: {str(s)[:40]}")
    return out


def _float(x: int | float) -> float:
    try:
        return float(x)
    except OverflowError:  # an integer beyond any float
        return math.inf


@dataclass
class Failure:
    why: str  # for the give-up message and the log
    retried: bool  # worth another try
    timed_out: bool = False


def post_json(target: Target, body: bytes, headers: dict[str, str], timeout_s: float) -> tuple[int, bytes]:
    """One POST; its status and body. Raises ``TimeoutError`` past ``timeout_s`` in all (a
    timer shuts the socket, so a server that trickles bytes cannot stretch it), else
    ``OSError`` or ``http.client.HTTPException``."""
    kind = http.client.HTTPSConnection if target.scheme == "https" else http.client.HTTPConnection
    conn = kind(target.host, target.port, timeout=timeout_s)
    cut = threading.Event()

    def cut_off():
        cut.set()
        if conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked recv; close() would not
            except OSError:
                pass

    timer = threading.Timer(timeout_s, cut_off)
    timer.daemon = True
    timer.start()
    try:
        conn.connect()
        if cut.is_set():
            raise TimeoutError
        conn.request("POST", target.path, body=body, headers={"Content-Type": "application/json", **headers})
        reply = conn.getresponse()
        data = reply.read(MAX_REPLY_BYTES + 1)
        if cut.is_set():
            raise TimeoutError
        return reply.status, data
    except (OSError, http.client.HTTPException):
        if cut.is_set():
            raise TimeoutError(f"no full answer within {timeout_s:g} s") from None
        raise
    finally:
        timer.cancel()
        conn.close()


class Health:
    """Since when requests have failed with none succeeding; raises ``ScorerGaveUp`` once that
    is ``give_up_after_s`` (and for every request after)."""

    def __init__(self, url: str, give_up_after_s: float):
        self.url, self.give_up_after_s = url, give_up_after_s
        self.failing_since: float | None = None  # when the oldest failed try since a success began
        self.gave_up: str | None = None
        self._lock = threading.Lock()

    def succeeded(self) -> None:
        with self._lock:
            self.failing_since = None

    def failed(self, started: float, why: str) -> None:
        with self._lock:
            if self.failing_since is None or started < self.failing_since:
                self.failing_since = started
            self.check()
            down_s = time.monotonic() - self.failing_since
            if down_s >= self.give_up_after_s:
                self.gave_up = (
                    f"reward server {self.url} has not answered for {down_s:.0f} s (reward.give_up_after_s: "
                    f"{self.give_up_after_s:g}); the last try: {why}. Is the server up?"
                )
                self.check()

    def check(self) -> None:
        if self.gave_up is not None:
            raise ScorerGaveUp(self.gave_up)

    def left_s(self) -> float:
        """Seconds until it gives up (infinite while nothing fails)."""
        with self._lock:
            if self.failing_since is None:
                return math.inf
            return self.give_up_after_s - (time.monotonic() - self.failing_since)


class RemoteReward(LearnedReward):
    Config = RemoteConfig

    def __init__(self, config: RemoteConfig, context: ScorerContext):
        super().__init__(config, context)
        self.target = parse_url(config.url)
        self.headers = resolve_headers(config.headers)
        check_reachable(self.target, config.url, config.connect_timeout_s)
        self.health = Health(config.url, config.give_up_after_s)
        self._closed = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=config.concurrency, thread_name_prefix="reward-http")

    def score_raw(self, items: Sequence[ScoreItem]) -> list[RawScore]:
        """Batches of ``batch_size`` sent ``concurrency`` at a time; scores in item order."""
        self.health.check()
        size = self.config.batch_size
        futures = [self._pool.submit(self._score_batch, items[i : i + size]) for i in range(0, len(items), size)]
        done, pending = wait(futures, return_when=FIRST_EXCEPTION)
        for f in futures:
            if f in done and f.exception() is not None:
                for other in pending:
                    other.cancel()  # the job is ending: send nothing more
                raise f.exception()
        return [score for f in futures for score in f.result()]

    def _score_batch(self, batch: Sequence[ScoreItem]) -> list[RawScore]:
        body = request_body(batch)
        attempt = 0
        while True:
            started = time.monotonic()
            result = self._try(body, len(batch))
            if not isinstance(result, Failure):
                self.health.succeeded()
                return [RawScore(v) if v is not None else RawScore(None, extras={"unscored": 1.0}) for v in result]
            self.health.failed(started, result.why)
            if not result.retried or attempt >= self.config.retries or not self._wait_before_retry(attempt):
                extras = {"failed": 1.0, **({"timed_out": 1.0} if result.timed_out else {})}
                return [RawScore(None, note=result.why, extras=dict(extras)) for _ in batch]
            attempt += 1

    def _try(self, body: bytes, n: int) -> list[float | None] | Failure:
        """One request: the scores, or what went wrong and whether to try again."""
        try:
            status, data = post_json(self.target, body, self.headers, self.config.request_timeout_s)
        except TimeoutError as e:
            return Failure(f"timed out after {self.config.request_timeout_s:g} s ({e})", True, timed_out=True)
        except (OSError, http.client.HTTPException) as e:
            return Failure(f"{type(e).__name__}: {e}", True)
        if not 200 <= status < 300:
            retried = status >= 500 or status in RETRIED_STATUSES
            return Failure(f"HTTP {status}: {data[:120]!r}", retried)
        try:
            return parse_reply(data, n)
        except BadReply as e:
            return Failure(f"a bad reply: {e}", False)

    def _wait_before_retry(self, attempt: int) -> bool:
        """Back off before another try; False when the scorer is closing."""
        delay = min(self.config.backoff_s * 2**attempt, MAX_BACKOFF_S) * random.uniform(0.5, 1.5)
        # Wake in time to give up when the deadline comes first.
        delay = max(0.0, min(delay, self.health.left_s() + 0.01))
        return not self._closed.wait(delay)

    def close(self) -> None:
        """Send nothing more; a try in flight ends by its own timeout, unwaited for."""
        self._closed.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
