"""The long-tail workload's data: heavy-tailed lengths, prompts that name their class, and the
reward's rule. No model is trained here (the bench's run does that)."""

import numpy as np
import pytest

from examples.long_tail import prepare
from examples.long_tail.reward import FILLER, tail_answer
from roles.tasks.base import Example


def filler_lengths(seed, count):
    rng = np.random.default_rng(seed)
    return np.array([len(prepare.draw_filler(rng, c)) for c in prepare.draw_classes(rng, count)])


def test_lengths_are_heavy_tailed_and_capped():
    lengths = filler_lengths(0, 20000) + 3  # the sum (1-2 tokens) and EOS
    stats = prepare.length_stats(lengths)
    assert 16 <= stats["mean"] <= 24
    assert stats["p99"] / stats["median"] > 8  # a geometric of the same mean gives about 4.6
    assert stats["over_100"] > 0.01
    assert lengths.max() - 3 <= prepare.MAX_FILLER < prepare.MAX_NEW_TOKENS


def test_prompts_name_their_class_in_the_set_shares():
    rows = prepare.prompt_rows(seed=0)
    assert rows == prepare.prompt_rows(seed=0)  # every rank reads the same file
    shares = {c: np.mean([r["prompt"][0] == c for r in rows]) for c in FILLER}
    for char, share, _ in prepare.LENGTH_CLASSES:
        assert shares[char] == pytest.approx(share, abs=0.05)
    for r in rows[:50]:
        a, b = r["prompt"][1:-1].split("+")
        assert r["answer"] == str(int(a) + int(b))


def test_sft_rows_answer_first_then_the_prompts_filler_then_eos(tmp_path):
    from transformers import AutoTokenizer

    from examples.toy.tiny_llama import save_char_tokenizer

    save_char_tokenizer(tmp_path, prepare.ALPHABET)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    rows = prepare.sft_rows(tok, prepare.sft_pairs(seed=0)[:5], draws=4, seed=0)
    assert len(rows) == 20
    for prompt, target in rows:
        assert target[-1] == tok.eos_token_id
        p, t = tok.decode(prompt, skip_special_tokens=True), tok.decode(target[:-1])
        a, b = p[1:-1].split("+")
        assert t.rstrip(p[0]) == str(int(a) + int(b)) and len(t) > len(str(int(a) + int(b)))
        assert tail_answer(t, Example(0, p, str(int(a) + int(b))))["score"] == 1.0


@pytest.mark.parametrize(
    ("response", "score"),
    [("18aaa", 1.0), ("18", 1.0), ("18ccc<eos>7", 1.0), ("18aa8", 0.0), ("aa18", 0.0), ("1", 0.0), ("", 0.0)],
)
def test_reward_is_the_sum_then_filler_only(response, score):
    assert tail_answer(response, Example(0, "a9+9=", "18")) == {"score": score, "correct": score}
