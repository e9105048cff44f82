"""roles/algorithm/logprobs.py: the learner's log pi of response tokens, batched and padded,
equals the same figure computed row by row without padding."""

from __future__ import annotations

import pytest
import torch

from roles.algorithm.logprobs import response_logprobs


def _tiny_llama(seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    sizes = dict(vocab_size=17, hidden_size=16, intermediate_size=32, max_position_embeddings=32)
    heads = dict(num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1)
    return LlamaForCausalLM(LlamaConfig(**sizes, **heads)).eval()


def _one_row(model, prompt, response, temperature):
    ids = torch.tensor([prompt + response])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : len(prompt) + len(response) - 1]
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(-1, torch.tensor(response)[:, None]).squeeze(-1)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_batched_equals_row_by_row(temperature):
    model = _tiny_llama()
    prompts = [[3, 4, 5], [6], [7, 8, 9, 10, 11]]
    responses = [[12, 13], [14, 15, 16, 2], [5]]
    with torch.no_grad():
        lp, mask = response_logprobs(model, prompts, responses, temperature)
        assert lp.shape == mask.shape == (3, 4) and lp.dtype == torch.float32
        assert mask.sum(1).tolist() == [2, 4, 1]
        for i, (p, r) in enumerate(zip(prompts, responses)):
            torch.testing.assert_close(lp[i, : len(r)], _one_row(model, p, r, temperature), rtol=1e-5, atol=1e-5)
        assert torch.all(lp[~mask] == 0)


def test_refuses_what_it_cannot_score():
    model = _tiny_llama()
    with pytest.raises(ValueError, match="temperature"):
        response_logprobs(model, [[3]], [[4]], 0.0)
    with pytest.raises(ValueError, match="one response per prompt"):
        response_logprobs(model, [[3], [4]], [[5]])
    with pytest.raises(ValueError, match="at least one token"):
        response_logprobs(model, [[]], [[5]])


def test_entropy_when_asked_is_the_vocabularys_at_each_position():
    model = _tiny_llama()
    prompts, responses = [[3, 4, 5], [6]], [[12, 13], [14, 15, 16]]
    with torch.no_grad():
        lp, mask, entropy = response_logprobs(model, prompts, responses, 0.7, with_entropy=True)
        plain_lp, _ = response_logprobs(model, prompts, responses, 0.7)
        torch.testing.assert_close(lp, plain_lp, rtol=0, atol=0)  # the default path is the same
        for i, (p, r) in enumerate(zip(prompts, responses)):
            ids = torch.tensor([p + r])
            logits = model(input_ids=ids).logits[0, len(p) - 1 : len(p) + len(r) - 1].float() / 0.7
            probs = torch.softmax(logits, -1)
            want = -(probs * probs.log()).sum(-1)
            torch.testing.assert_close(entropy[i, : len(r)], want, rtol=1e-5, atol=1e-5)
        assert torch.all(entropy[~mask] == 0)
        _, _, empty = response_logprobs(model, [[3]], [[]], 1.0, with_entropy=True)
        assert empty.shape == (1, 0)
