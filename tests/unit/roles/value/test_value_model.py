"""roles/value/: a causal LM folder loads as a value model with a seeded head; values are the
head's outputs at the positions before each response token, whatever the batching; train_step
lowers the value loss; checkpoint and export give the same values back; the role map's check
refuses folders that cannot carry a value head. One process (the sharded case: tests/mpi)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from roles.algorithm.gae import value_loss
from roles.value.folder import check_value_model_folder
from roles.value.model import load_value_model
from roles.value.training import ValueModel

pytestmark = pytest.mark.timeout(120)

ALPHABET = "0123456789+="
VOCAB = 3 + len(ALPHABET)  # <pad>, <bos>, <eos>, then the alphabet


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from examples.toy.tiny_llama import build_tiny_llama

    out = tmp_path_factory.mktemp("value") / "tiny"
    return build_tiny_llama(out, ALPHABET, hidden_size=64, num_layers=2, num_heads=1, intermediate_size=128)


def rows(n, seed=0):
    """``n`` prompts and responses of different lengths (some responses empty)."""
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(3, VOCAB, int(rng.integers(1, 7))) for _ in range(n)]
    responses = [rng.integers(3, VOCAB, int(rng.integers(0, 8))) for _ in range(n)]
    responses[0] = rng.integers(3, VOCAB, 5)  # at least one row with tokens
    return prompts, responses


def test_a_causal_lm_folder_loads_with_a_seeded_head_and_its_body(folder):
    from transformers import AutoModelForCausalLM

    model = load_value_model(folder, torch.float32)
    again = load_value_model(folder, "float32")
    lm = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    assert type(model).__name__ == "LlamaForTokenClassification"
    assert model.score.weight.shape == (1, 64) and model.score.bias.shape == (1,)
    assert not any(name.startswith("lm_head") for name, _ in model.named_parameters())
    # The head: drawn from a fixed seed (every critic rank and every run alike), bias 0.
    torch.testing.assert_close(model.score.weight, again.score.weight, rtol=0, atol=0)
    assert float(model.score.bias.detach()) == 0.0
    assert 0.005 < float(model.score.weight.detach().std()) < 0.05  # the config's initializer_range, 0.02
    torch.testing.assert_close(model.model.embed_tokens.weight, lm.model.embed_tokens.weight, rtol=0, atol=0)
    assert all(getattr(m, "p", 0.0) == 0.0 for m in model.modules() if isinstance(m, torch.nn.Dropout))
    assert model.config.architectures == ["LlamaForTokenClassification"] and model.config.num_labels == 1


def test_a_bfloat16_value_model_gives_float32_values(folder):
    vm = ValueModel(load_value_model(folder, "bfloat16"), lr=1e-3)
    assert next(vm.model.parameters()).dtype == torch.bfloat16
    got = vm.values(*rows(3))
    assert all(v.dtype == np.float32 for v in got)


def test_values_are_the_outputs_before_each_response_token(folder):
    vm = ValueModel(load_value_model(folder, torch.float32), lr=1e-3, micro_batch=3)
    prompts, responses = rows(7)
    got = vm.values(prompts, responses)
    assert [v.shape for v in got] == [(len(r),) for r in responses]
    assert all(v.dtype == np.float32 for v in got)
    p, r = prompts[0], responses[0]
    with torch.no_grad():
        seq = torch.as_tensor(np.concatenate([p, r]), dtype=torch.long)[None]
        per_position = vm.model(input_ids=seq).logits[0, :, 0]
    want = per_position[len(p) - 1 : len(p) + len(r) - 1].numpy()
    np.testing.assert_allclose(got[0], want, rtol=0, atol=1e-5)
    # Not the outputs at the response tokens themselves (a shift by one would pass the shape).
    assert not np.allclose(got[0], per_position[len(p) : len(p) + len(r)].numpy(), atol=1e-5)


def test_values_do_not_depend_on_batching_or_padding(folder):
    model = load_value_model(folder, torch.float32)
    prompts, responses = rows(9, seed=3)
    alone = ValueModel(model, lr=1e-3, micro_batch=1).values(prompts, responses)
    together = ValueModel(model, lr=1e-3, micro_batch=4).values(prompts, responses)
    order = list(reversed(range(9)))
    shuffled = [prompts[i] for i in order], [responses[i] for i in order]
    reordered = ValueModel(model, lr=1e-3, micro_batch=9).values(*shuffled)
    for i in range(9):
        np.testing.assert_allclose(together[i], alone[i], rtol=0, atol=1e-5)
        np.testing.assert_allclose(reordered[order.index(i)], alone[i], rtol=0, atol=1e-5)


def test_the_value_loss_falls_on_a_fixed_batch(folder):
    vm = ValueModel(load_value_model(folder, torch.float32), lr=3e-3, micro_batch=8, grad_clip=1.0)
    prompts, responses = rows(8, seed=1)
    rng = np.random.default_rng(2)
    returns = [rng.normal(size=len(r)).astype(np.float32) for r in responses]
    tokens = sum(len(r) for r in responses)
    losses = []
    for _ in range(30):
        old = vm.values(prompts, responses)  # as a critic step does: the values GAE used
        m = vm.train_step(prompts, responses, returns, old, clip=0.5)
        assert m["tokens"] == tokens and m["nonfinite_skipped"] == 0.0 and m["grad_norm"] > 0
        assert 0.0 <= m["value_clip_frac"] <= 1.0
        losses.append(m["value_loss"])
    assert losses[-1] < 0.5 * losses[0], losses
    # The reported loss is the step's token mean, as computed from the values themselves.
    values = vm.values(prompts, responses)
    mse = sum(float(((v - g) ** 2).sum()) for v, g in zip(values, returns)) / tokens
    reported = vm.train_step(prompts, responses, returns, values, clip=None)["value_loss"]
    assert reported == pytest.approx(0.5 * mse, rel=1e-4)


def test_the_clipped_value_loss_by_hand():
    values = torch.tensor([[1.0, 0.0, 5.0]])
    old = torch.tensor([[0.0, 0.0, 0.0]])
    returns = torch.tensor([[2.0, 1.0, 0.0]])
    mask = torch.tensor([[True, True, False]])
    # Token 0: v moved 1 from old, clipped to 0.5: (0.5 - 2)^2 = 2.25 > (1 - 2)^2 = 1, counted.
    # Token 1: unmoved: 1 either way, not counted. Token 2 is padding.
    loss, m = value_loss(values, old, returns, mask, 0.5, num_tokens=4)
    assert float(loss) == pytest.approx(0.5 * (2.25 + 1.0) / 4)
    assert float(m["value_clip_frac"]) * 4 == 1.0  # one of the 4 tokens
    loss, m = value_loss(values, old, returns, mask, None, num_tokens=2)
    assert float(loss) == pytest.approx(0.5 * (1.0 + 1.0) / 2) and float(m["value_clip_frac"]) == 0.0


def test_a_nonfinite_loss_skips_the_update(folder):
    vm = ValueModel(load_value_model(folder, torch.float32), lr=1e-2)
    prompts, responses = rows(4)
    before = {k: v.detach().clone() for k, v in vm.model.named_parameters()}
    returns = [np.full(len(r), np.nan, np.float32) for r in responses]
    m = vm.train_step(prompts, responses, returns, vm.values(prompts, responses), clip=0.2)
    assert m["nonfinite_skipped"] == 1.0
    for k, v in vm.model.named_parameters():
        assert torch.equal(v, before[k]), k


def test_rows_that_do_not_match_are_refused(folder):
    vm = ValueModel(load_value_model(folder, torch.float32), lr=1e-2)
    prompts, responses = rows(2)
    good = [np.zeros(len(r), np.float32) for r in responses]
    with pytest.raises(ValueError, match="row 0: 5 response tokens but 4 returns"):
        vm.train_step(prompts, responses, [np.zeros(4, np.float32), good[1]], good, clip=0.2)
    with pytest.raises(ValueError, match="2 prompts, 2 responses, 1 returns"):
        vm.train_step(prompts, responses, good[:1], good, clip=0.2)


def test_checkpoint_then_load_continues_the_same_run(folder, tmp_path):
    prompts, responses = rows(6, seed=4)
    returns = [np.ones(len(r), np.float32) for r in responses]

    def step(vm):
        return vm.train_step(prompts, responses, returns, vm.values(prompts, responses), clip=0.2)

    vm = ValueModel(load_value_model(folder, torch.float32), lr=1e-2, micro_batch=2)
    step(vm)
    vm.save(tmp_path)
    assert (tmp_path / "critic" / ".metadata").is_file()
    fresh = ValueModel(load_value_model(folder, torch.float32), lr=1e-2, micro_batch=2)
    fresh.load(tmp_path)
    for a, b in zip(vm.values(prompts, responses), fresh.values(prompts, responses)):
        np.testing.assert_array_equal(a, b)
    # The optimizer's moments came back too: the next step is the same step.
    assert step(fresh)["value_loss"] == step(vm)["value_loss"]
    for (name, a), (_, b) in zip(vm.model.named_parameters(), fresh.model.named_parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)


def test_export_then_load_gives_the_trained_values(folder, tmp_path):
    prompts, responses = rows(5, seed=5)
    vm = ValueModel(load_value_model(folder, torch.float32), lr=1e-2)
    for _ in range(3):
        returns = [np.full(len(r), 2.0, np.float32) for r in responses]
        vm.train_step(prompts, responses, returns, vm.values(prompts, responses), clip=None)
    vm.export(tmp_path / "out", tokenizer_dir=folder)
    assert (tmp_path / "out" / "tokenizer.json").is_file()
    assert json.loads((tmp_path / "out" / "config.json").read_text())["architectures"] == [
        "LlamaForTokenClassification"
    ]
    loaded = ValueModel(load_value_model(tmp_path / "out", torch.float32), lr=1e-2)
    torch.testing.assert_close(loaded.model.score.weight, vm.model.score.weight, rtol=0, atol=0)
    assert not torch.equal(loaded.model.score.weight, load_value_model(folder, torch.float32).score.weight)
    for a, b in zip(vm.values(prompts, responses), loaded.values(prompts, responses)):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-6)


def test_the_folder_check_names_the_class_or_what_is_wrong(folder, tmp_path):
    assert check_value_model_folder(folder) == "LlamaForTokenClassification"
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    (unknown / "config.json").write_text(json.dumps({"model_type": "nothing"}))
    with pytest.raises(ValueError, match="is a 'nothing' model, which transformers has no token-classification"):
        check_value_model_folder(unknown)
    (unknown / "config.json").unlink()
    with pytest.raises(ValueError, match="has no config.json: not a Hugging Face model folder"):
        check_value_model_folder(unknown)
    with pytest.raises(ValueError, match="is not a folder"):
        check_value_model_folder(tmp_path / "absent")
    (unknown / "config.json").write_text("{")
    with pytest.raises(ValueError, match="cannot be read as JSON"):
        check_value_model_folder(unknown)
    (unknown / "config.json").write_text(json.dumps({"architectures": ["X"]}))
    with pytest.raises(ValueError, match="names no model_type"):
        check_value_model_folder(unknown)


def test_the_folder_check_imports_no_torch(folder):
    """The role map's check runs it on the controller, which must not import torch."""
    code = (
        "import sys; from roles.value.folder import check_value_model_folder as c; "
        f"print(c({str(folder)!r}), 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["LlamaForTokenClassification", "False"]


def test_values_and_update_in_one_pass_equal_values_then_a_train_step(folder):
    prompts, responses = rows(7, seed=8)

    def returns_of(values):
        return [v + 1.0 for v in values]  # any function of the values, as GAE is

    apart = ValueModel(load_value_model(folder, torch.float32), lr=1e-2, micro_batch=3)
    fused = ValueModel(load_value_model(folder, torch.float32), lr=1e-2, micro_batch=3)
    values = apart.values(prompts, responses)
    want = apart.train_step(prompts, responses, returns_of(values), values, clip=0.2)
    got_values, got = fused.values_and_update(prompts, responses, returns_of)
    for a, b in zip(values, got_values):
        np.testing.assert_allclose(a, b, atol=1e-6)
    assert got["value_loss"] == pytest.approx(want["value_loss"], abs=1e-6)
    for (name, a), (_, b) in zip(apart.model.named_parameters(), fused.model.named_parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
