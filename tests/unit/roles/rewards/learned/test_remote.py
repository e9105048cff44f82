"""The remote reward against a real HTTP server on 127.0.0.1 that scores, hangs, errs, returns
garbage and dies: scores come back in order, failures are counted and never crash, and a
server that is gone ends the call with a clear error within a bound."""

from __future__ import annotations

import socket
import time
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from roles.rewards.learned.base import ScoreItem, ScorerContext, ScorerGaveUp
from roles.rewards.learned.remote import RemoteConfig, RemoteReward, resolve_headers
from roles.rewards.scoring import GroupToScore, build_scoring
from roles.sections.reward import RewardSection
from support.reward_server import HANG, ScoreServer, scores_of

pytestmark = pytest.mark.timeout(60)

# Fast retries, so that a test of many failures takes well under a second per batch.
FAST = {"backoff_s": 0.01, "request_timeout_s": 2.0, "connect_timeout_s": 2.0}


def items(n: int) -> list[ScoreItem]:
    example = SimpleNamespace(id=7, answer="12", metadata={"level": 3})
    messages = [{"role": "user", "content": "5+7="}]
    return [ScoreItem(messages, "5+7=", "x" * (i + 1), example) for i in range(n)]


def reward(url: str, **options) -> RemoteReward:
    return RemoteReward(RemoteConfig.model_validate({"url": url, **FAST, **options}), ScorerContext())


@pytest.fixture
def server():
    with ScoreServer() as s:
        yield s


def test_scores_come_back_in_order_in_batches_of_batch_size(server):
    scorer = reward(server.url, batch_size=3, concurrency=2)
    scores = scorer.score_raw(items(10))
    assert [s.value for s in scores] == [float(i + 1) for i in range(10)]
    assert all(s.extras == {} for s in scores)
    assert sorted(server.sizes()) == [1, 3, 3, 3]
    sent = server.requests[0][0]
    assert sent == {
        "prompt": "5+7=",
        "messages": [{"role": "user", "content": "5+7="}],
        "response": sent["response"],
        "answer": "12",
        "metadata": {"level": 3},
    }
    scorer.close()


def test_at_most_concurrency_requests_are_in_flight():
    with ScoreServer(delay_s=0.2) as server:
        scorer = reward(server.url, batch_size=1, concurrency=2)
        assert [s.value for s in scorer.score_raw(items(8))] == [float(i + 1) for i in range(8)]
        scorer.close()
    assert len(server.requests) == 8
    assert server.max_in_flight == 2  # the bound held, and was used


def test_a_hung_server_times_out_counted_and_the_call_returns_in_bounded_time():
    with ScoreServer(lambda s, items, i: HANG) as server:
        scorer = reward(server.url, batch_size=2, concurrency=2, request_timeout_s=0.3, retries=1)
        t0 = time.monotonic()
        scores = scorer.score_raw(items(4))
        took = time.monotonic() - t0
        scorer.close()
    assert took < 2.0, took  # two tries of 0.3 s per batch, the batches side by side
    assert all(s.value is None and s.extras == {"failed": 1.0, "timed_out": 1.0} for s in scores)
    assert len(server.requests) == 4  # each batch tried twice


def test_a_server_that_trickles_bytes_is_cut_at_the_request_timeout():
    def trickle(handler):
        handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
        for _ in range(100):  # a header line every 0.1 s: no single read waits long
            handler.wfile.write(b"X-Slow: 1\r\n")
            handler.wfile.flush()
            time.sleep(0.1)

    with ScoreServer(lambda s, items, i: trickle) as server:
        scorer = reward(server.url, request_timeout_s=0.5, retries=0)
        t0 = time.monotonic()
        scores = scorer.score_raw(items(2))
        took = time.monotonic() - t0
        scorer.close()
    assert took < 1.5, took
    assert all(s.extras.get("timed_out") == 1.0 for s in scores)


def test_a_500_is_retried_until_the_server_recovers():
    answer = lambda s, items, i: (500, b"busy") if i < 2 else scores_of(items, lambda it: 1.0)  # noqa: E731
    with ScoreServer(answer) as server:
        scorer = reward(server.url, retries=3)
        assert [s.value for s in scorer.score_raw(items(3))] == [1.0, 1.0, 1.0]
        scorer.close()
    assert len(server.requests) == 3


def test_a_400_is_not_retried_and_its_items_fail():
    with ScoreServer(lambda s, items, i: (400, b"bad request")) as server:
        scorer = reward(server.url, retries=3)
        scores = scorer.score_raw(items(3))
        scorer.close()
    assert len(server.requests) == 1
    assert all(s.value is None and s.extras == {"failed": 1.0} for s in scores)
    assert "HTTP 400" in scores[0].note


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b'{"scores": [1.0]}',  # wrong length
        b'{"scores": ["high", "low", "low"]}',
        b'{"scores": [true, false, true]}',
        b'{"scores": [1.0, NaN, 2.0]}',
        b'{"rewards": [1, 2, 3]}',
        b"[1, 2, 3]",
        b"",
        b'{"scores": [1e999, 1, 1]}',
        b'{"scores": [' + b"9" * 400 + b", 1, 1]}",
    ],
    ids=["text", "length", "strings", "bools", "nan", "key", "list", "empty", "inf", "huge"],
)
def test_garbage_fails_its_batch_counted_never_a_crash(body):
    # Only the second of three batches gets garbage: the others are scored.
    answer = lambda s, items, i: (200, body) if i == 1 else scores_of(items, lambda it: 2.0)  # noqa: E731
    with ScoreServer(answer) as server:
        scorer = reward(server.url, batch_size=3, concurrency=1, retries=2)
        scores = scorer.score_raw(items(9))
        scorer.close()
    assert len(server.requests) == 3  # a bad reply is not retried
    assert [s.value for s in scores[:3] + scores[6:]] == [2.0] * 6
    assert all(s.value is None and s.extras == {"failed": 1.0} for s in scores[3:6])


def test_null_scores_are_unscored_items():
    answer = lambda s, items, i: scores_of(items, lambda it: None if len(it["response"]) == 2 else 1)  # noqa: E731
    with ScoreServer(answer) as server:
        scorer = reward(server.url)
        scores = scorer.score_raw(items(3))
        scorer.close()
    assert [s.value for s in scores] == [1.0, None, 1.0]
    assert scores[1].extras == {"unscored": 1.0}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_server_down_at_start_is_a_clear_error_within_seconds():
    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(ConnectionError) as e:
        reward(f"http://127.0.0.1:{port}/score")
    assert time.monotonic() - t0 < 5
    assert "reward.url" in str(e.value) and f"127.0.0.1:{port}" in str(e.value)


def test_a_server_that_dies_mid_run_ends_the_job_after_give_up_after_s(server):
    scorer = reward(server.url, retries=50, backoff_s=0.05, give_up_after_s=1.0)
    assert [s.value for s in scorer.score_raw(items(2))] == [1.0, 2.0]
    server.stop()
    t0 = time.monotonic()
    with pytest.raises(ScorerGaveUp, match=r"reward server http://127\.0\.0\.1:\d+/score has not answered for \d+ s"):
        scorer.score_raw(items(2))
    assert 1.0 <= time.monotonic() - t0 < 4.0
    with pytest.raises(ScorerGaveUp):  # and stays given up
        scorer.score_raw(items(1))
    scorer.close()


def test_giving_up_ends_the_scoring_rather_than_scoring_zeros(server):
    """``RewardScoring`` turns other errors into failed samples; giving up goes through."""
    section = RewardSection.model_validate({"name": "http", "url": server.url, **FAST, "give_up_after_s": 0.5})
    scoring = build_scoring(section, ScorerContext())
    group = GroupToScore(SimpleNamespace(answer="", metadata={}), [], "1+1=", ["2", "4"])
    assert [r.score for r in scoring.score([group])[0]] == [1.0, 1.0]
    server.stop()
    with pytest.raises(ScorerGaveUp):
        for _ in range(20):  # a call whose first failure starts the clock may return zeros
            scoring.score([group])
            time.sleep(0.1)
    scoring.close()


def test_failures_are_logged_components_through_the_scoring():
    answer = lambda s, items, i: (503, b"down") if i % 2 else scores_of(items, lambda it: 1.0)  # noqa: E731
    with ScoreServer(answer) as server:
        section = RewardSection.model_validate(
            {"name": "http", "url": server.url, **FAST, "retries": 0, "batch_size": 2, "concurrency": 1}
        )
        scoring = build_scoring(section, ScorerContext())
        group = GroupToScore(SimpleNamespace(answer="", metadata={}), [], "1+1=", ["2", "4", "6", "8"])
        results = scoring.score([group])[0]
        scoring.close()
    assert [r.score for r in results] == [1.0, 1.0, 0.0, 0.0]
    assert [r.failures for r in results] == [0, 0, 1, 1]
    assert [r.components.get("http/failed") for r in results] == [None, None, 1.0, 1.0]


def test_close_does_not_wait_for_a_hung_request():
    with ScoreServer(lambda s, items, i: HANG) as server:
        scorer = reward(server.url, request_timeout_s=30.0)
        scorer._pool.submit(scorer._score_batch, items(1))
        time.sleep(0.2)
        t0 = time.monotonic()
        scorer.close()
        assert time.monotonic() - t0 < 1.0


def test_headers_take_credentials_from_the_environment(server, monkeypatch):
    monkeypatch.setenv("MPIRL_TEST_REWARD_TOKEN", "s3cret")
    scorer = reward(server.url, headers={"Authorization": "Bearer ${MPIRL_TEST_REWARD_TOKEN}", "X-Run": "a"})
    scorer.score_raw(items(1))
    scorer.close()
    assert server.headers[0]["Authorization"] == "Bearer s3cret"
    assert server.headers[0]["X-Run"] == "a"


def test_an_unset_header_variable_names_the_header_not_a_value():
    with pytest.raises(ValueError, match=r"reward\.headers\.Authorization: the environment variable NOT_SET_X"):
        resolve_headers({"Authorization": "Bearer ${NOT_SET_X}"}, environ={})


@pytest.mark.parametrize(
    "options, field",
    [
        ({"url": "ftp://x"}, "url"),
        ({"url": "http://"}, "url"),
        ({"url": "localhost:8000"}, "url"),
        ({"url": "http://user:pw@host/"}, "url"),
        ({"url": "http://host:99999/"}, "url"),
        ({"url": "http://host/", "headers": {"Authorization": "Bearer abc"}}, "headers"),
        ({"url": "http://host/", "headers": {"bad name": "x"}}, "headers"),
        ({"url": "http://host/", "batch_size": 0}, "batch_size"),
        ({"url": "http://host/", "concurrency": 0}, "concurrency"),
        ({"url": "http://host/", "request_timeout_s": 0}, "request_timeout_s"),
        ({}, "url"),
    ],
)
def test_bad_options_are_refused_naming_the_field(options, field):
    with pytest.raises(ValidationError) as e:
        RewardSection.model_validate({"name": "http", **options})
    assert any(err["loc"][-1] == field for err in e.value.errors()), e.value.errors()


def test_a_good_role_map_section_validates():
    section = RewardSection.model_validate(
        {"name": "http", "url": "https://rm.example:8443/v1/score?x=1", "batch_size": 8, "retries": 0}
    )
    assert section.components[0].options["url"] == "https://rm.example:8443/v1/score?x=1"
