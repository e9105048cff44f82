"""The LLM judge: its template and parse rule, its config checks, and tiny judges whose verdict
is known (``support.judges``) run through the real torch engine (and vLLM's, where installed)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
from pydantic import ValidationError

from roles.rewards.learned.base import ScoreItem, ScorerContext
from roles.rewards.learned.judge import Judge
from roles.rewards.learned.judge_prompt import capture_group_text, check_parse_rule, fill, parse_score
from roles.rewards.scoring import GroupToScore, build_scoring
from roles.sections.reward import RewardSection
from roles.tasks.base import Example
from support.judges import build_lookup_judge

pytestmark = pytest.mark.timeout(240)

ALPHABET = "0123456789+=QAS: x"  # what the templates below and the judges' verdicts use
TEMPLATE = "Q:{prompt} A:{response} S:"  # ends in ':' whatever the response: the verdict follows it
PARITY_TEMPLATE = "Q:{prompt} A:{response}"  # ends in the response's last character


def _item(response: str, prompt: str = "3+4=", answer: str = "7") -> ScoreItem:
    example = Example(id=0, prompt=prompt, answer=answer)
    return ScoreItem(messages=[{"role": "user", "content": prompt}], prompt=prompt, response=response, example=example)


def _parity(c: str) -> str | None:
    # An even last digit -> "1", odd -> "0", anything else -> "x" (which no rule reads).
    return ("0" if int(c) % 2 else "1") if c.isdigit() else "x"


@pytest.fixture(scope="module")
def judges(tmp_path_factory):
    root = tmp_path_factory.mktemp("judges")
    return {
        # "7" after anything, then the end: a verdict that always parses
        "seven": build_lookup_judge(root / "seven", ALPHABET, lambda c: None if c == "7" else "7"),
        # reads the response's last digit
        "parity": build_lookup_judge(root / "parity", ALPHABET, _parity),
        # writes "x" forever: a judge that would hang but for max_new_tokens
        "stuck": build_lookup_judge(root / "stuck", ALPHABET, lambda c: "x"),
    }


def _judge(path, **options) -> Judge:
    config = Judge.Config.model_validate({"path": str(path), "template": TEMPLATE, "parse": r"(\d+)", **options})
    return Judge(config, ScorerContext(seed=0))


# ---------------------------------------------------------------- template and parse rule


def test_the_template_sees_prompt_response_and_answer():
    item = ScoreItem(
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
        prompt="<rendered>",
        response="four {not a field}",
        example=Example(id=3, prompt="2+2?", answer="4"),
    )
    text = fill("P={prompt}|R={response}|A={answer}|{{literal}}", item)
    assert text == "P=Be brief.\n2+2?|R=four {not a field}|A=4|{literal}"
    no_answer = ScoreItem(messages=[{"role": "user", "content": "q"}], prompt="q", response="r", example=None)
    assert fill("{prompt}:{response}:{answer}", no_answer) == "q:r:"


def test_the_parse_rule_reads_a_finite_number_from_the_chosen_match():
    rule = re.compile(r"Score:\s*(-?[\d.]+)")
    text = "Score: 3 ... on reflection, Score: 8.5"
    assert parse_score(text, rule) == 8.5
    assert parse_score(text, rule, last=False) == 3.0
    assert parse_score("no verdict", rule) is None
    assert parse_score("Score: 1.2.3", rule) is None  # matched, but not a number
    assert parse_score("Score: inf", re.compile(r"Score: (\w+)")) is None  # not finite
    assert parse_score("7 x", re.compile(r"(\d)|x")) is None  # the group took no part in the last match


def test_the_capture_group_is_found_past_escapes_classes_and_other_groups():
    assert capture_group_text(r"\(x\) [(]+ (?:a|b) (\d+(?:\.\d+)?) end") == r"\d+(?:\.\d+)?"
    assert capture_group_text(r"[]()](?P<score>[0-9]+)") == "[0-9]+"
    assert capture_group_text(r"[^]\]](\d)") == r"\d"
    assert capture_group_text(r"no group") is None
    assert check_parse_rule(r"(?i)RATING: (\d+)/10").pattern == r"(?i)RATING: (\d+)/10"


# ---------------------------------------------------------------- bad config


def _validate(tmp_path, judges, **options):
    return RewardSection.model_validate(
        {"name": "judge", "path": str(judges["seven"]), "template": TEMPLATE, "parse": r"(\d+)", **options}
    )


@pytest.mark.parametrize(
    "options, field, said",
    [
        ({"template": "Rate: {prompt}"}, "template", "no {response} field"),
        ({"template": "{question} {response}"}, "template", "unknown field {question}"),
        ({"template": "{response!r}"}, "template", "format spec or conversion"),
        ({"template": "{response} }"}, "template", "literal braces"),
        ({"parse": r"(\d+"}, "parse", "not a regular expression"),
        ({"parse": r"\d+"}, "parse", "0 capture groups"),
        ({"parse": r"(\d+)/(\d+)"}, "parse", "2 capture groups"),
        ({"parse": r"Verdict: ([A-Z]+)"}, "parse", "cannot match a number"),
        ({"max_new_tokens": 128}, "max_new_tokens", "no room"),
        ({"max_prompt_tokens": 100, "max_new_tokens": 64}, "max_prompt_tokens", "exceed"),
        ({"engine": "vllm", "device": "cpu"}, "device", "engine: torch"),
        ({"score_min": 5, "score_max": 1}, "score_min", "below score_max"),
        ({"on_parse_failure": "zero"}, "on_parse_failure", "on_parse_failure"),
    ],
)
def test_a_bad_option_is_named(tmp_path, judges, options, field, said):
    with pytest.raises(ValidationError) as e:
        _validate(tmp_path, judges, **options)
    assert field in str(e.value) and said in str(e.value), str(e.value)


def test_a_folder_that_is_not_a_causal_lm_is_named(tmp_path, judges):
    classifier = tmp_path / "classifier"
    classifier.mkdir()
    (classifier / "config.json").write_text('{"architectures": ["LlamaForSequenceClassification"]}')
    for path, said in [(classifier, "not a causal language model"), (tmp_path / "nowhere", "no config.json")]:
        with pytest.raises(ValidationError) as e:
            _validate(tmp_path, judges, path=str(path))
        assert "path" in str(e.value) and said in str(e.value), str(e.value)


def test_mpirl_check_refuses_a_bad_judge_with_exit_2_naming_the_field(base_config, write_config, judges, capsys):
    from launch import cli

    base_config["reward"] = {"name": "judge", "path": str(judges["seven"]), "template": "{prompt}", "parse": r"(\d)"}
    with pytest.raises(SystemExit) as info:
        cli.main(["check", str(write_config(base_config))])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "reward" in err and "template" in err and "{response}" in err, err


def test_the_judges_options_are_checked_without_torch(judges):
    # The controller checks the role map and never imports torch or transformers.
    code = (
        "import sys; from roles.sections.reward import RewardSection; "
        f"RewardSection.model_validate({{'name': 'judge', 'path': {str(judges['seven'])!r}, "
        "'template': '{response}', 'parse': '(\\\\d)'}); "
        "print(sorted(m for m in ('torch', 'transformers', 'vllm') if m in sys.modules))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


# ---------------------------------------------------------------- judges run in the torch engine


def test_a_verdict_is_parsed_and_the_output_kept_as_its_note(judges):
    judge = _judge(judges["seven"])
    scores = judge.score_raw([_item("12"), _item("5"), _item("")])
    assert [s.value for s in scores] == [7.0, 7.0, 7.0]
    assert [s.note for s in scores] == ["7", "7", "7"]
    assert all(s.extras == {"parse_failed": 0.0, "truncated": 0.0} for s in scores)
    clamped = _judge(judges["seven"], score_min=0, score_max=5).score_raw([_item("1")])[0]
    assert (clamped.value, clamped.extras["clamped"]) == (5.0, 1.0)


def test_the_judge_reads_the_response(judges):
    judge = _judge(judges["parity"], template=PARITY_TEMPLATE, max_new_tokens=1)
    scores = judge.score_raw([_item("12"), _item("13"), _item("4"), _item("+")])
    assert [s.value for s in scores] == [1.0, 0.0, 1.0, None]
    assert [s.note for s in scores] == ["1", "0", "1", "x"]
    assert scores[3].extras["parse_failed"] == 1.0


def test_an_over_long_prompt_keeps_its_end_and_is_counted(judges):
    judge = _judge(judges["parity"], template=PARITY_TEMPLATE, max_new_tokens=1, max_prompt_tokens=12)
    long, short = _item("1" * 30 + "8"), _item("3")
    scores = judge.score_raw([long, short])
    assert [s.value for s in scores] == [1.0, 0.0]  # the long one's last digit was still read
    assert [s.extras["truncated"] for s in scores] == [1.0, 0.0]


def test_a_judge_that_never_stops_ends_at_max_new_tokens_as_a_parse_failure(judges):
    t0 = time.perf_counter()
    scores = _judge(judges["stuck"], max_new_tokens=20).score_raw([_item("1"), _item("2")])
    assert time.perf_counter() - t0 < 60
    assert [s.value for s in scores] == [None, None]
    assert [s.note for s in scores] == ["x" * 20] * 2
    assert all(s.extras["parse_failed"] == 1.0 for s in scores)
    fallback = _judge(judges["stuck"], max_new_tokens=4, on_parse_failure=-1).score_raw([_item("1")])[0]
    assert (fallback.value, fallback.extras["parse_failed"]) == (-1.0, 1.0)


def _scoring(path, **options):
    section = RewardSection.model_validate(
        {"name": "judge", "path": str(path), "template": TEMPLATE, "parse": r"Score: (\d+)", **options}
    )
    return build_scoring(section, ScorerContext(seed=0))


def _groups(*responses):
    item = _item("")
    return [GroupToScore(example=item.example, messages=item.messages, prompt=item.prompt, responses=list(responses))]


def test_a_random_judge_writes_garbage_scored_0_and_counted(tmp_path):
    from examples.toy.tiny_llama import build_tiny_llama

    # A random model over an alphabet without the rule's letters can never write "Score: n".
    garbage = build_tiny_llama(tmp_path / "random", ALPHABET, num_layers=1, max_position_embeddings=128)
    scoring = _scoring(garbage, max_new_tokens=12)
    try:
        results = scoring.score(_groups("12", "3", "45"))[0]
    finally:
        scoring.close()
    assert [r.score for r in results] == [0.0, 0.0, 0.0]
    assert [r.failures for r in results] == [1, 1, 1]
    assert all(r.components["judge/parse_failed"] == 1.0 for r in results)
    notes = [r.notes.get("judge", "") for r in results]  # its own words, for samples.jsonl
    assert any(notes) and all(len(n) <= 12 for n in notes), notes


def test_a_judge_that_raises_fails_its_call_scored_0_and_counted(judges):
    scoring = _scoring(judges["seven"], parse=r"(\d)")

    def broken(*_args, **_kwargs):
        raise RuntimeError("the judge's device fell over")

    scoring.learned[0].scorer.engine.generate = broken
    results = scoring.score(_groups("1", "2"))[0]
    assert [(r.score, r.failures, r.components["judge/failed"]) for r in results] == [(0.0, 1, 1.0)] * 2
    assert all("judge" not in r.notes for r in results)


def test_a_chat_judge_reads_the_filled_template_as_a_user_turn(tmp_path):
    from examples.toy.tiny_bpe import save_bpe_chat_tokenizer
    from examples.toy.tiny_llama import build_tiny_llama_for_tokenizer

    tokenizer = save_bpe_chat_tokenizer(tmp_path / "tok", ["Q: 3+4= A: 7 S: 9", "Score"], vocab_size=300)
    path = build_tiny_llama_for_tokenizer(tmp_path / "chat", tokenizer, num_layers=1, max_position_embeddings=128)
    judge = _judge(path, max_new_tokens=4)
    rendered = judge.judge_prompt(_item("12"))
    assert rendered == "<|im_start|>user\nQ:3+4= A:12 S:<|im_end|>\n<|im_start|>assistant\n"
    assert _judge(path, chat_template=False).judge_prompt(_item("12")) == "Q:3+4= A:12 S:"
    assert len(judge.score_raw([_item("12")])) == 1  # it runs; a random model's verdict may not parse


# ---------------------------------------------------------------- the vLLM engine


def test_a_vllm_judge_gives_the_torch_judges_verdicts(judges):
    pytest.importorskip("vllm", reason="vllm is not installed")
    items = [_item("12"), _item("13"), _item("+")]
    vllm = _judge(judges["parity"], template=PARITY_TEMPLATE, max_new_tokens=1, engine="vllm")
    try:
        got = vllm.score_raw(items)
    finally:
        vllm.close()
    want = _judge(judges["parity"], template=PARITY_TEMPLATE, max_new_tokens=1).score_raw(items)
    verdicts = [(1.0, "1"), (0.0, "0"), (None, "x")]
    assert [(s.value, s.note) for s in got] == [(s.value, s.note) for s in want] == verdicts
