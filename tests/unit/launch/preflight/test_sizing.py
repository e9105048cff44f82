"""launch.preflight.sizing and the size bounds: a role map whose sizes cannot fit is refused before any work."""

from __future__ import annotations

import copy
import json

import pytest

from launch import config, preflight
from launch.preflight import sizing

GIB = 1 << 30


def parse(base, **sections):
    raw = copy.deepcopy(base)
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    return preflight.parse(raw)


@pytest.fixture
def llama_8b_like(dummy_model) -> str:
    """The dummy folder (no weights) with an 8B-Llama-shaped config: only shapes matter here."""
    shape = {
        "model_type": "llama",
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
    }
    (dummy_model / "config.json").write_text(json.dumps(shape))
    return str(dummy_model)


def test_the_parameter_count_is_read_from_the_safetensors_headers(tmp_path):
    from transformers import AutoModelForCausalLM

    from examples.arith.tokens import ALPHABET
    from examples.toy.tiny_llama import build_tiny_llama

    folder = build_tiny_llama(tmp_path / "m", ALPHABET, hidden_size=64, num_layers=2, num_heads=2)
    model = AutoModelForCausalLM.from_pretrained(folder)
    shape = sizing.model_shape(str(folder))
    assert shape.params == sum(p.numel() for p in model.state_dict().values())
    assert shape.layers == 2 and shape.kv_width == 64 and shape.vocab == model.config.vocab_size


def test_a_consolidated_copy_beside_indexed_shards_is_counted_once(tmp_path):
    # Mistral's folders hold consolidated.safetensors and the shards the index names; transformers
    # loads the shards, so the parameters are theirs.
    import numpy as np
    from safetensors.numpy import save_file

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 1}))
    a, b = {"a": np.zeros((4, 8), np.float32)}, {"b": np.zeros(16, np.float32)}
    save_file(a, str(folder / "model-00001-of-00002.safetensors"))
    save_file(b, str(folder / "model-00002-of-00002.safetensors"))
    save_file({**a, **b}, str(folder / "consolidated.safetensors"))
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    assert sizing.model_shape(str(folder)).params == 48
    (folder / "model.safetensors.index.json").unlink()  # without an index every file counts
    assert sizing.model_shape(str(folder)).params == 96


def test_a_micro_batch_whose_logits_cannot_fit_is_refused_naming_the_fields(base_config, llama_8b_like, monkeypatch):
    monkeypatch.setattr(sizing, "machine_memory", lambda: 64 * GIB)
    # 64 rows x 8192 positions x 128256 vocab x 8 bytes: about 500 GiB of logits per trainer
    with pytest.raises(
        config.ConfigError, match=r"one trainer rank needs at least \d+\.\d GiB.*a micro-batch's logits"
    ) as e:
        parse(
            base_config,
            rollout={"prompts_per_step": 64, "samples_per_prompt": 8, "max_new_tokens": 8192},
            algorithm={"micro_batch": 64},
        )
    assert "lower algorithm.micro_batch or rollout.max_new_tokens" in str(e.value)
    assert "more than this machine's 64.0 GiB" in str(e.value)
    # the same micro-batch of 1 row (8 GiB of logits), with 2 generations a step: it fits
    cfg = parse(
        base_config,
        rollout={"prompts_per_step": 1, "samples_per_prompt": 2, "max_new_tokens": 8192},
        algorithm={"micro_batch": 1},
    )
    assert cfg.algorithm.micro_batch == 1


def test_only_the_rows_a_trainer_gets_are_counted(base_config, llama_8b_like, monkeypatch):
    monkeypatch.setattr(sizing, "machine_memory", lambda: 1 << 50)
    # micro_batch 4096 but each trainer trains on 2 sequences a step: its logits are 2 rows'
    cfg = parse(base_config, rollout={"prompts_per_step": 1, "samples_per_prompt": 2, "max_new_tokens": 1024})
    (trainer, generator) = sizing.rank_needs(cfg)
    assert dict(trainer.parts)["a micro-batch's logits"] == 2 * 1024 * 128256 * 8


def test_the_torch_engines_kv_cache_is_counted_for_the_generator(base_config, llama_8b_like, monkeypatch):
    monkeypatch.setattr(sizing, "machine_memory", lambda: 1 << 50)
    cfg = parse(base_config, rollout={"prompts_per_step": 64, "samples_per_prompt": 8, "max_new_tokens": 4000})
    (_, generator) = sizing.rank_needs(cfg, longest_prompt=1000)
    per_token = 32 * 2 * 8 * 128 * 4  # layers x (K, V) x kv heads x head dim x float32
    # 512 rows at most are decoded together, each up to 1000 prompt + 4000 response tokens
    assert dict(generator.parts)["KV cache"] == 512 * 5000 * per_token
    trainer_needs = sizing.rank_needs(cfg)[0].total
    monkeypatch.setattr(sizing, "machine_memory", lambda: int(trainer_needs) + 1)  # the trainer fits
    with pytest.raises(config.ConfigError, match=r"one generator rank .*KV cache.*lower rollout.max_new_tokens"):
        parse(base_config, rollout={"prompts_per_step": 64, "samples_per_prompt": 8, "max_new_tokens": 4000})


def test_a_streaming_generators_kv_cache_is_its_slots_over_two_responses(base_config, llama_8b_like, monkeypatch):
    monkeypatch.setattr(sizing, "machine_memory", lambda: 1 << 50)
    cfg = parse(
        base_config,
        rollout={"prompts_per_step": 64, "samples_per_prompt": 8, "max_new_tokens": 4000, "mode": "stream"},
        world={**base_config["world"], "generator": {"ranks": 1, "max_seqs": 96}},
    )
    (_, generator) = sizing.rank_needs(cfg, longest_prompt=1000)
    per_token = 32 * 2 * 8 * 128 * 4
    # rows join while older ones still run: a slot's window spans a prompt and two responses
    assert dict(generator.parts)["KV cache"] == 96 * 9000 * per_token


def test_the_data_step_checks_again_with_the_longest_prompt(base_config, llama_8b_like, monkeypatch):
    from launch.preflight.data import prepare_data

    monkeypatch.setattr(sizing, "machine_memory", lambda: 1 << 50)
    sections = {"rollout": {"prompts_per_step": 4, "samples_per_prompt": 2, "max_new_tokens": 1000}}
    cfg = parse(base_config, algorithm={"micro_batch": 1}, **sections)
    longest = prepare_data(cfg).stats["longest_prompt"]
    assert longest > 1
    # room for the KV cache of 1-token prompts, not for the task's real ones
    monkeypatch.setattr(sizing, "machine_memory", lambda: int(max(n.total for n in sizing.rank_needs(cfg))) + 1)
    assert parse(base_config, algorithm={"micro_batch": 1}, **sections).algorithm.micro_batch == 1
    with pytest.raises(config.ConfigError, match=rf"task: with prompts of up to {longest} tokens, one generator rank"):
        prepare_data(cfg)


def test_weights_and_adamw_state_are_shared_out_over_the_trainers(base_config, tmp_path, monkeypatch):
    from examples.arith.tokens import ALPHABET
    from examples.toy.tiny_llama import build_tiny_llama

    folder = build_tiny_llama(tmp_path / "m", ALPHABET, hidden_size=64, num_layers=2, num_heads=2)
    params = sizing.model_shape(str(folder)).params
    base_config["model"]["path"] = str(folder)
    one = parse(base_config)
    two = parse(base_config, world={"controller": 1, "generator": 1, "reward": 1, "trainer": 2})
    assert dict(sizing.rank_needs(one)[0].parts)["weights, gradients and AdamW state (sharded)"] == params * 16
    assert dict(sizing.rank_needs(two)[0].parts)["weights, gradients and AdamW state (sharded)"] == params * 8
    monkeypatch.setattr(sizing, "machine_memory", lambda: params * 12)  # room for 2 trainers, not 1
    with pytest.raises(config.ConfigError, match=r"one trainer rank .*weights, gradients and AdamW state"):
        parse(base_config)
    assert (
        parse(base_config, world={"controller": 1, "generator": 1, "reward": 1, "trainer": 2}).world.trainer.ranks == 2
    )


def test_other_families_names_for_the_shapes_are_read(dummy_model):
    """GPT-2's n_layer/n_embd/n_head (and MPT's, Falcon's...) size the KV cache as Llama's names do."""
    llama = {"num_hidden_layers": 48, "hidden_size": 2048, "num_attention_heads": 16, "vocab_size": 512}
    gpt2 = {"model_type": "gpt2", "n_layer": 48, "n_embd": 2048, "n_head": 16, "n_inner": None, "vocab_size": 512}
    mpt = {"model_type": "mpt", "n_layers": 48, "d_model": 2048, "n_heads": 16, "vocab_size": 512}
    (dummy_model / "model.safetensors").unlink()  # the shapes from config.json alone: no parameter count
    shapes = []
    for data in (llama, gpt2, mpt):
        (dummy_model / "config.json").write_text(json.dumps(data))
        shapes.append(sizing.model_shape(str(dummy_model)))
    assert shapes[0] == shapes[1] == shapes[2] == sizing.ModelShape(None, 48, 2048, 512)
    # multi-query attention (GPT-BigCode, Falcon-7B): one key/value head
    falcon = {"model_type": "falcon", "n_layer": 32, "hidden_size": 4544, "n_head": 71, "multi_query": True}
    (dummy_model / "config.json").write_text(json.dumps(falcon))
    assert sizing.model_shape(str(dummy_model)).kv_width == 64


def test_a_gpt2_shaped_model_is_refused_like_the_llama_of_the_same_shapes(base_config, dummy_model, monkeypatch):
    monkeypatch.setattr(sizing, "machine_memory", lambda: 64 * GIB)
    sections = {"rollout": {"prompts_per_step": 64, "samples_per_prompt": 8, "max_new_tokens": 16000}}
    gpt2 = {"model_type": "gpt2", "n_layer": 48, "n_embd": 2048, "n_head": 16, "n_positions": 32768}
    (dummy_model / "config.json").write_text(json.dumps(gpt2))
    with pytest.raises(config.ConfigError, match=r"one generator rank needs at least .*KV cache"):
        parse(base_config, **sections)


def test_the_machine_memory_is_this_hosts():
    with open("/proc/meminfo") as f:
        total_kib = int(next(line for line in f if line.startswith("MemTotal:")).split()[1])
    assert abs(sizing.machine_memory() - total_kib * 1024) < 0.05 * total_kib * 1024


@pytest.mark.parametrize(
    ("section", "values", "field"),
    [
        ("rollout", {"prompts_per_step": 10**9}, "rollout.prompts_per_step"),
        ("rollout", {"samples_per_prompt": 100_000}, "rollout.samples_per_prompt"),
        ("rollout", {"max_new_tokens": 10**8}, "rollout.max_new_tokens"),
        ("algorithm", {"micro_batch": 10**7}, "algorithm.micro_batch"),
        ("reward", {"name": "exact", "workers": 100_000}, "reward.workers"),
        ("eval", {"samples": 10**6}, "eval.samples"),
        ("weights", {"bucket_mb": 10**9}, "weights.bucket_mb"),
        ("task", {"name": "arith", "max_operand": 10**6}, "task.max_operand"),
    ],
)
def test_a_size_no_run_needs_is_refused_naming_the_field(base_config, section, values, field):
    with pytest.raises(config.ConfigError, match=rf"{field}: Input should be less than or equal to"):
        parse(base_config, **{section: values})
