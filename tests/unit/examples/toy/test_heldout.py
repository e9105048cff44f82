import numpy as np
from transformers import AutoModelForCausalLM

from examples.toy.heldout import greedy_accuracy
from examples.toy.tiny_llama import TINY, build_tiny_llama
from roles.engines.base import SamplingConfig
from roles.engines.torch_engine import TorchEngine


def test_scores_each_greedy_response_and_restores_the_mode(tmp_path):
    model = AutoModelForCausalLM.from_pretrained(build_tiny_llama(tmp_path, "0123456789+=", **TINY.kwargs())).train()
    prompts = {"a": np.array([1, 4, 13, 5, 14], np.int32), "b": np.array([1, 6, 14], np.int32)}  # 1+2=, 3=
    seen = {}

    def score(key, response_ids) -> float:
        seen[key] = response_ids.tolist()
        return 1.0 if key == "a" else 0.0

    assert greedy_accuracy(model, prompts, score, max_new_tokens=3) == 0.5
    assert model.training  # left as it was found
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=3)
    want = [g[0].response_ids.tolist() for g in TorchEngine(model).generate(list(prompts.values()), 1, greedy)]
    assert [seen[k] for k in prompts] == want
    assert greedy_accuracy(model, {}, score, max_new_tokens=3) == 0.0
