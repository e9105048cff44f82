"""A model folder's tokenizer, as ``AutoTokenizer`` would load it, without importing the auto classes.

``AutoTokenizer`` picks a tokenizer class from the folder's ``config.json`` and
``tokenizer_config.json`` by rules of its own, and then calls that class's ``from_pretrained``.
The auto classes import torch and much of transformers, while the controller and reward ranks
need only the tokenizer, so:

- the reward ranks are told the class the controller loaded (``class_ref``) and load it directly;
- the controller asks ``AutoTokenizer`` once per folder and remembers the class it picked in a
  small cache (``MPIRL_CACHE_DIR``, default ``$XDG_CACHE_HOME/mpirl`` or ``~/.cache/mpirl``)
  keyed by everything the choice depends on (``_choice_key``). A cache that cannot be used is
  only a slower start; a remembered class that fails to load sends the choice back.

The class is loaded as ``AutoTokenizer`` loads it (``from_pretrained(path, _from_auto=True)``),
so both ways give the same tokenizer.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import tempfile
from pathlib import Path

CACHE_FILE = "tokenizer-classes.json"
_TOKENIZER_FILE_PREFIXES = ("tokenizer", "tekken", "special_tokens", "added_tokens", "vocab", "merges", "spiece")
_MAX_ENTRIES = 256  # a cache of model folders, not a history: oldest entries go first


def cache_dir() -> Path:
    if os.environ.get("MPIRL_CACHE_DIR"):
        return Path(os.environ["MPIRL_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mpirl"


def class_ref_of(tokenizer) -> str:
    """``module:QualName`` of ``tokenizer``'s class: what another rank needs to load it directly."""
    cls = type(tokenizer)
    return f"{cls.__module__}:{cls.__qualname__}"


def load_tokenizer(path: str, class_ref: str | None = None):
    """The tokenizer of model folder ``path``; returns ``(tokenizer, its class_ref)``.

    ``class_ref``: the class another rank loaded for this folder (then neither the auto classes
    nor the cache are consulted). Errors are transformers' own.
    """
    key = None
    if class_ref is None:
        key = _choice_key(path)
        class_ref = _cache_read().get(key) if key is not None else None
    if class_ref is not None and _loads_directly(class_ref):
        try:
            return _class_from_ref(class_ref).from_pretrained(path, _from_auto=True), class_ref
        except Exception:  # noqa: BLE001 - AutoTokenizer decides again, and raises what it raises
            # A class this environment lacks (another node's packages, a cache from an install
            # that kept its version string): the cached choice is replaced below.
            pass
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    class_ref = class_ref_of(tokenizer)
    if key is not None and _loads_directly(class_ref):
        _cache_write(key, class_ref)
    return tokenizer, class_ref


def eos_ids(path: str, class_ref: str | None = None) -> tuple[int, ...]:
    """The EOS id of model folder ``path``'s tokenizer, as a tuple: empty when the folder holds
    no tokenizer files or its tokenizer names no EOS.

    A chat template ends the assistant's turn with the tokenizer's EOS (``<|im_end|>``), which
    a checkpoint's ``generation_config.json`` need not list (a base model's config ends at
    ``<|endoftext|>``): a response must end at either, as vLLM's do.
    """
    folder = Path(path)
    if not folder.is_dir() or not any(p.name.startswith(_TOKENIZER_FILE_PREFIXES) for p in folder.iterdir()):
        return ()
    tokenizer, _ = load_tokenizer(str(path), class_ref)
    eos = tokenizer.eos_token_id
    return () if eos is None else (int(eos),)


def remember_tokenizer_class(path: str) -> None:
    """Record the class AutoTokenizer picks for a folder mpirl has just written (the SFT warm
    start), so that the first job on it starts as fast as later ones. For a process that has
    imported the auto classes anyway."""
    key = _choice_key(path)
    if key is not None and key not in _cache_read():
        load_tokenizer(path)


def _loads_directly(ref: str) -> bool:
    # transformers' own classes only: a class from a folder's own code (a dynamic module)
    # exists only in the process that AutoTokenizer loaded it in.
    return ref.startswith("transformers.") and ":" in ref


def _class_from_ref(ref: str):
    module, _, name = ref.partition(":")
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def _choice_key(path: str) -> str | None:
    """What AutoTokenizer's choice of class depends on, hashed; None for anything but a local
    folder (a hub name resolves through transformers' own cache, which this does not model)."""
    folder = Path(path)
    if not folder.is_dir():
        return None
    try:
        version = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return None
    # The files a tokenizer is made of, by name (the Mistral backend is chosen by tekken.json);
    # others (a checkpoint, a stamp file written after the folder) leave the choice alone.
    files = sorted(p.name for p in folder.iterdir() if p.name.startswith(_TOKENIZER_FILE_PREFIXES))
    # Optional packages AutoTokenizer consults (the Mistral backend, sentencepiece models).
    optional = [m for m in ("mistral_common", "sentencepiece") if importlib.util.find_spec(m) is not None]
    h = hashlib.sha256()
    for part in (str(path), version, "\0".join(files), "\0".join(optional)):
        h.update(part.encode() + b"\0\0")
    for name in ("config.json", "tokenizer_config.json"):
        f = folder / name
        h.update(f.read_bytes() if f.is_file() else b"<none>")
        h.update(b"\0\0")
    return h.hexdigest()


def _cache_read() -> dict:
    try:
        data = json.loads((cache_dir() / CACHE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and all(isinstance(v, str) for v in data.values()) else {}


def _cache_write(key: str, ref: str) -> None:
    entries = _cache_read()
    entries.pop(key, None)
    entries[key] = ref  # newest last
    entries = dict(list(entries.items())[-_MAX_ENTRIES:])
    folder = cache_dir()
    tmp = None
    try:  # written whole and renamed: jobs starting together never read half a file
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=folder, prefix=".tokenizer-classes.", delete=False) as f:
            tmp = f.name
            json.dump(entries, f)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide a shared cache from the other users
        os.replace(tmp, folder / CACHE_FILE)
    except OSError:
        # A read-only home: every job asks AutoTokenizer, a slower start and nothing else.
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
