from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformers import GenerationConfig, LlamaConfig

from examples.arith.tokens import ArithConfig, ArithTokens
from roles.tasks.arith import ArithPrompt


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


class _Oracle(torch.nn.Module):
    """A 'model' that reads the left-padded batch and puts all mass on the right next character.

    With ``wrong_when`` it answers a+b+1 for the pairs it selects, to check exact counting.
    Decoding goes through the torch engine: the ids read so far are kept in its KV cache, as a
    model keeps its keys there, so finished rows leave the batch as they would.
    """

    def __init__(self, task, wrong_when=lambda a, b: False):
        super().__init__()
        self.task, self.wrong_when = task, wrong_when
        self.dummy = torch.nn.Parameter(torch.zeros(1))
        self.vocab = len(task.tokenizer)
        self.config = LlamaConfig(num_hidden_layers=1, eos_token_id=task.eos_id, pad_token_id=task.pad_id)
        self.generation_config = GenerationConfig(eos_token_id=task.eos_id)

    def forward(self, input_ids, attention_mask, position_ids, past_key_values, use_cache=True, logits_to_keep=0):
        new = input_ids[:, None, :, None].float()
        read, _ = past_key_values.layers[0].update(new, new)
        logits = torch.zeros(input_ids.shape[0], input_ids.shape[1], self.vocab)
        for i, row in enumerate(read[:, 0, :, 0].long().tolist()):
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
