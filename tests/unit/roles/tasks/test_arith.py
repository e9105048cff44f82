from types import SimpleNamespace

import numpy as np
import pytest
import torch

from roles.tasks.arith import ALPHABET, ArithConfig, ArithPrompt, ArithTask, ArithTokens, arith_exact
from roles.tasks.tiny_llama import TINY, build_tiny_llama, save_char_tokenizer


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    save_char_tokenizer(d, ALPHABET)
    return ArithTokens(d)


def test_split_is_deterministic_and_disjoint(task):
    train, held = task.train_prompts(), task.heldout_prompts()
    assert (len(train), len(held)) == (320, 80)
    assert not {p.id for p in train} & {p.id for p in held}
    assert {p.id for p in train} | {p.id for p in held} == set(range(400))
    again = ArithTokens(task.tokenizer, ArithConfig(seed=0))
    assert again.heldout_prompts() == held
    other = ArithTokens(task.tokenizer, ArithConfig(seed=1))
    assert other.heldout_prompts() != held


def test_prompt_text_and_encoding(task):
    p = task.prompt((3, 15))
    assert p == ArithPrompt(id=3 * 20 + 15, a=3, b=15)
    assert (p.text, p.answer) == ("3+15=", "18")
    ids = task.encode_prompt(p)
    assert ids.dtype == np.int32 and ids.tolist() == [1, 6, 13, 4, 8, 14]
    assert task.encode_answer(p).tolist() == [4, 11, 2]  # '1', '8', <eos>
    assert task.decode([4, 11, 2, 5, 5]) == "18"


def test_score(task):
    one, eight, eos, pad = 4, 11, 2, 0
    assert task.score((3, 15), [one, eight, eos]) == 1.0
    assert task.score(3 * 20 + 15, [one, eight]) == 1.0  # cut by max_new_tokens right after
    assert task.score((3, 15), [one, eight, eos, one]) == 1.0  # after EOS: not part of the response
    assert task.score((3, 15), [one, eight, one]) == 0.0  # "181"
    assert task.score((3, 15), [one, eos]) == 0.0
    assert task.score((3, 15), [eos]) == 0.0
    assert task.score((3, 15), [one, eight, pad]) == 0.0
    assert task.score((0, 0), [3, eos]) == 1.0


def test_arith_exact():
    assert arith_exact("3+15=", "18") == 1.0
    assert arith_exact("3+15=", "18<eos>") == 1.0
    assert arith_exact("3+15=", "18<eos>77") == 1.0
    assert arith_exact("3+15=", "185") == 0.0
    assert arith_exact("3+15=", " 18") == 0.0
    assert arith_exact("3+15=", "") == 0.0
    assert arith_exact("19+19=", "38") == 1.0
    with pytest.raises(ValueError, match="not an arithmetic prompt"):
        arith_exact("hello", "1")


class _Oracle(torch.nn.Module):
    """A 'model' that reads the left-padded batch and puts all mass on the right next character.

    With ``wrong_when`` it answers a+b+1 for the pairs it selects, to check exact counting.
    """

    def __init__(self, task, wrong_when=lambda a, b: False):
        super().__init__()
        self.task, self.wrong_when = task, wrong_when
        self.dummy = torch.nn.Parameter(torch.zeros(1))
        self.vocab = len(task.tokenizer)

    def forward(self, input_ids, attention_mask, position_ids):
        logits = torch.zeros(input_ids.shape[0], input_ids.shape[1], self.vocab)
        for i, row in enumerate(input_ids.tolist()):
            assert attention_mask[i].tolist() == [0] * row.count(0) + [1] * (len(row) - row.count(0))
            text = self.task.tokenizer.decode(row, skip_special_tokens=True)
            prompt, done = text.split("=")
            a, b = map(int, prompt.split("+"))
            want = str(a + b + (1 if self.wrong_when(a, b) else 0))
            nxt = self.task.eos_id if done == want else self.task.tokenizer.convert_tokens_to_ids(want[len(done)])
            logits[i, -1, nxt] = 10.0
        return SimpleNamespace(logits=logits)


def test_heldout_accuracy_counts_exact_greedy_answers(task):
    assert task.heldout_accuracy(_Oracle(task)) == 1.0
    wrong = lambda a, b: a < 10
    held = task.heldout_prompts()
    expected = sum(p.a >= 10 for p in held) / len(held)
    assert 0 < expected < 1
    assert task.heldout_accuracy(_Oracle(task, wrong)) == pytest.approx(expected)


def test_sft_rows_put_loss_on_the_answer_only(task):
    from examples.arith.prepare import tokenize

    ids, mask, labels = tokenize(task, [task.prompt((3, 15)), task.prompt((1, 2))])
    assert ids[0].tolist() == [1, 6, 13, 4, 8, 14, 4, 11, 2]  # <bos>3+15=18<eos>
    assert labels[0].tolist() == [-100] * 6 + [4, 11, 2]
    assert ids[1].tolist() == [1, 4, 13, 5, 14, 6, 2, 0, 0]  # <bos>1+2=3<eos> then right padding
    assert labels[1].tolist() == [-100] * 5 + [6, 2, -100, -100]
    assert mask[1].tolist() == [1] * 7 + [0, 0]


def test_short_sft_runs_and_saves(tmp_path):
    """A cut-down warm start (the full one is calibrated offline): the loss falls, the result loads."""
    from transformers import AutoModelForCausalLM

    from examples.arith.prepare import sft_warm_start

    base = build_tiny_llama(tmp_path / "base", ALPHABET, **TINY.kwargs())
    task = ArithTokens(base)
    threads_before = torch.get_num_threads()
    out = sft_warm_start(base, task, out_dir=tmp_path / "sft", steps=30, lr=1e-3, batch=16, seed=0)
    assert out["pairs"] == 80
    assert torch.get_num_threads() == threads_before  # sft trains on 1 thread, then restores
    assert out["final_loss"] < 0.7 * out["first_loss"]
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "sft")
    assert task.heldout_accuracy(model) == pytest.approx(out["heldout_acc_after"])


def test_the_arith_task_is_a_task_with_the_same_split():
    """What the RL job sees: examples with ids, answers, and the held-out pairs as the eval split."""
    from roles.tasks import build_task
    from roles.tasks.arith import ArithExact

    task = build_task(ArithTask.Config(), seed=0)
    train, held = task.examples("train"), task.examples("eval")
    from roles.tasks.arith import _split

    want_train, want_held = _split(20, 0.2, 0)
    assert [e.id for e in train] == [p.id for p in want_train]
    assert [e.id for e in held] == [p.id for p in want_held]
    ex = task.example(3 * 20 + 15)
    assert (ex.prompt, ex.answer) == ("3+15=", "18")
    assert ArithExact()("18", ex) == {"score": 1.0, "correct": 1.0}
    assert ArithExact()("18<eos>", ex)["score"] == 1.0 and ArithExact()("185", ex)["score"] == 0.0
    assert [e.id for e in build_task(ArithTask.Config(), seed=1).examples("eval")] != [e.id for e in held]
