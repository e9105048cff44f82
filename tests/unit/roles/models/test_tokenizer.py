"""roles/models/tokenizer.py: a folder's tokenizer as AutoTokenizer loads it, without the auto classes
once the class is known (from the cache, or from the controller)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import transformers
from transformers import AutoTokenizer

from examples.toy.tiny_bpe import save_bpe_chat_tokenizer
from examples.toy.tiny_llama import save_char_tokenizer
from roles.models import tokenizer as tk

TEXTS = ["What is 12 plus 30?", "The answer is 42.", "hello world, again and again"] * 20


def _bpe(path):
    save_bpe_chat_tokenizer(path, TEXTS, vocab_size=320)
    return path


def _char(path):
    save_char_tokenizer(path, "0123456789+= ")
    return path


def _bpe_as(path, tokenizer_class: str, model_type: str, architecture: str):
    """The BPE folder, its tokenizer_config naming ``tokenizer_class``, beside a model config."""
    _bpe(path)
    cfg = json.loads((path / "tokenizer_config.json").read_text())
    cfg["tokenizer_class"] = tokenizer_class
    (path / "tokenizer_config.json").write_text(json.dumps(cfg))
    (path / "config.json").write_text(json.dumps({"model_type": model_type, "architectures": [architecture]}))
    return path


def _qwen_config_llama_class(path):
    """DeepSeek-R1-Distill-Qwen's case: a qwen2 model whose tokenizer_config names the Llama
    tokenizer. AutoTokenizer knows the hub's class is wrong for qwen2 and does not take it."""
    return _bpe_as(path, "LlamaTokenizerFast", "qwen2", "Qwen2ForCausalLM")


def _gpt2_class(path):
    return _bpe_as(path, "GPT2Tokenizer", "gpt2", "GPT2LMHeadModel")


FOLDERS = {"bpe": _bpe, "char": _char, "qwen2-with-llama-class": _qwen_config_llama_class, "gpt2": _gpt2_class}


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("MPIRL_CACHE_DIR", str(folder))
    return folder


def _same(a, b, text="What is 12 plus 30? 42"):
    assert type(a) is type(b)
    assert a(text)["input_ids"] == b(text)["input_ids"]
    ids = a(text)["input_ids"]
    assert a.decode(ids, skip_special_tokens=True) == b.decode(ids, skip_special_tokens=True)
    assert (a.eos_token_id, a.pad_token_id, a.bos_token_id) == (b.eos_token_id, b.pad_token_id, b.bos_token_id)
    assert a.padding_side == b.padding_side and a.chat_template == b.chat_template
    if a.chat_template:
        chat = [{"role": "user", "content": text}]
        assert a.apply_chat_template(chat, add_generation_prompt=True) == b.apply_chat_template(
            chat, add_generation_prompt=True
        )


def _refuse_auto(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("AutoTokenizer was asked")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", refuse)


@pytest.mark.parametrize("kind", sorted(FOLDERS))
def test_the_class_auto_tokenizer_chose_is_remembered_and_loads_the_same_tokenizer(tmp_path, monkeypatch, kind):
    path = FOLDERS[kind](tmp_path / kind)
    want = AutoTokenizer.from_pretrained(str(path))
    first, ref = tk.load_tokenizer(str(path))  # not cached yet: AutoTokenizer decides
    assert type(first) is type(want)
    assert ref == tk.class_ref_of(want)
    _refuse_auto(monkeypatch)
    again, ref_again = tk.load_tokenizer(str(path))  # from the cache
    text = "12+30= 42" if kind == "char" else "What is 12 plus 30? 42"  # the char one knows digits only
    _same(again, want, text)
    told, _ = tk.load_tokenizer(str(path), ref)  # as a reward rank loads it
    _same(told, want, text)
    assert ref_again == ref


def test_the_hub_class_is_not_taken_where_auto_tokenizer_overrides_it(tmp_path):
    path = _qwen_config_llama_class(tmp_path / "q")
    tok, ref = tk.load_tokenizer(str(path))
    assert "llama" not in ref.lower()
    assert type(tok) is type(AutoTokenizer.from_pretrained(str(path)))


def test_a_changed_tokenizer_config_asks_auto_tokenizer_again(tmp_path, monkeypatch):
    path = _bpe(tmp_path / "bpe")
    tk.load_tokenizer(str(path))
    cfg = json.loads((path / "tokenizer_config.json").read_text())
    cfg["tokenizer_class"] = "GPT2Tokenizer"
    (path / "tokenizer_config.json").write_text(json.dumps(cfg))
    asked = []
    real = transformers.AutoTokenizer.from_pretrained
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: asked.append(a) or real(*a, **k))
    tok, ref = tk.load_tokenizer(str(path))
    assert asked and type(tok).__name__ == "GPT2Tokenizer"


def test_a_corrupt_cache_or_one_that_cannot_be_written_only_costs_time(tmp_path, cache):
    path = _bpe(tmp_path / "bpe")
    cache.mkdir()
    (cache / tk.CACHE_FILE).write_text("{not json")
    tok, _ = tk.load_tokenizer(str(path))
    assert type(tok) is type(AutoTokenizer.from_pretrained(str(path)))
    assert json.loads((cache / tk.CACHE_FILE).read_text())  # rewritten whole
    (cache / tk.CACHE_FILE).unlink()
    cache.rmdir()
    cache.write_text("a file where the folder should be")
    tok, _ = tk.load_tokenizer(str(path))
    assert type(tok) is type(AutoTokenizer.from_pretrained(str(path)))


def test_the_cache_keeps_a_bounded_number_of_folders(tmp_path, cache, monkeypatch):
    monkeypatch.setattr(tk, "_MAX_ENTRIES", 2)
    for i in range(3):
        tk.load_tokenizer(str(_char(tmp_path / f"c{i}")))
    entries = json.loads((cache / tk.CACHE_FILE).read_text())
    assert len(entries) == 2 and tk._choice_key(str(tmp_path / "c2")) in entries


def test_a_missing_folder_is_transformers_error(tmp_path):
    with pytest.raises(OSError):
        tk.load_tokenizer(str(tmp_path / "nowhere"))


def test_a_known_class_loads_without_torch_or_the_auto_classes(tmp_path, cache):
    """What the controller (cached) and the reward ranks (told) import: no torch, no auto classes."""
    path = _bpe(tmp_path / "bpe")
    _, ref = tk.load_tokenizer(str(path))
    script = f"""
import sys
from roles.models import tokenizer as tk
cached, _ = tk.load_tokenizer({str(path)!r})
told, _ = tk.load_tokenizer({str(path)!r}, {ref!r})
heavy = [m for m in ("torch", "transformers.models.auto.tokenization_auto") if m in sys.modules]
assert not heavy, heavy
print(type(cached).__name__, type(told).__name__)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [ref.split(":")[1]] * 2


def test_a_class_that_is_not_transformers_own_goes_through_auto_tokenizer(tmp_path, cache):
    """A folder's own tokenizer code exists only where AutoTokenizer loaded it: never cached,
    never loaded by name on another rank."""
    path = _bpe(tmp_path / "bpe")
    want = AutoTokenizer.from_pretrained(str(path))
    tok, ref = tk.load_tokenizer(str(path), "transformers_modules.custom.tokenization:MyTokenizer")
    assert type(tok) is type(want) and ref == tk.class_ref_of(want)
    assert not tk._loads_directly("transformers_modules.custom.tokenization:MyTokenizer")


def test_a_remembered_class_that_fails_to_load_goes_back_to_auto_tokenizer(tmp_path, cache):
    """Another node's environment, or an install that kept its version string: the cached
    class does not load here, so AutoTokenizer decides again and the cache is corrected."""
    path = _bpe(tmp_path / "bpe")
    key = tk._choice_key(str(path))
    tk._cache_write(key, "transformers.no_such_module:NoSuchTokenizer")
    tok, ref = tk.load_tokenizer(str(path))
    assert type(tok) is type(AutoTokenizer.from_pretrained(str(path)))
    assert tk._cache_read()[key] == ref != "transformers.no_such_module:NoSuchTokenizer"
    told, _ = tk.load_tokenizer(str(path), "transformers:NoSuchTokenizer")  # as a reward rank is told
    assert type(told) is type(tok)


def test_a_folder_remembered_after_writing_loads_without_auto_tokenizer_the_first_time(tmp_path, monkeypatch):
    path = _bpe(tmp_path / "bpe")
    tk.remember_tokenizer_class(str(path))
    _refuse_auto(monkeypatch)
    tok, ref = tk.load_tokenizer(str(path))
    assert ref == "transformers.tokenization_utils_tokenizers:TokenizersBackend"
    tk.remember_tokenizer_class(str(path))  # known already: nothing is loaded again


def test_a_file_that_is_no_part_of_the_tokenizer_keeps_the_remembered_class(tmp_path):
    path = _bpe(tmp_path / "bpe")
    key = tk._choice_key(str(path))
    (path / "mpirl-sft.json").write_text("{}")  # a stamp written after the folder
    assert tk._choice_key(str(path)) == key
    (path / "tekken.json").write_text("{}")  # what makes AutoTokenizer consider the Mistral backend
    assert tk._choice_key(str(path)) != key
