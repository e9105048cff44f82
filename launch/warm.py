"""Import ahead what a rank's role will need, while rank 0 prepares the data.

Start-up is mostly imports. Rank 0 prepares the data (launch/main.py) while the other ranks
wait for its verdict; importing their modules in that wait makes the two overlap.

Only imports: nothing is built, and a failure here is left for the real build to raise, with
the rank and role named as usual. The one file read is the model's config.json, to know whether
an optional package transformers would import is needed (:func:`unused_optional_packages`).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import sys
from pathlib import Path

# The modules each role's build imports (launch/builders.py), the slowest first.
_BY_ROLE = {
    "generator": ["launch.job", "roles.generator"],
    "trainer": [
        "launch.job",
        "transformers.models.auto.modeling_auto",
        "transformers.modeling_utils",  # the model classes' base: what from_pretrained imports first
        "roles.policy.model",
        "roles.trainer",
    ],
    "reward": [  # no torch: the tokenizer's class comes from the controller (roles/models/tokenizer.py)
        "launch.job",
        "transformers.tokenization_utils_tokenizers",
        "roles.models.tokenizer",
        "roles.reward",
        "roles.rewards.sandbox",
        "roles.tasks",
    ],
    "colocated": [
        "launch.job",
        "transformers.models.auto.modeling_auto",
        "transformers.modeling_utils",
        "roles.policy.model",
        "roles.colocated",
    ],
}
_BY_ENGINE = {
    "torch": ["transformers.models.auto.modeling_auto", "transformers.modeling_utils", "roles.engines.torch_engine"],
    "vllm": ["roles.engines.vllm_engine", "vllm"],
    "sim": ["roles.engines.sim_engine"],
}


def modules_for(role: str, engine: str | None) -> list[str]:
    """What ``role``'s build will import (``engine``: the generator engine, for roles that generate)."""
    names = list(_BY_ROLE.get(role, ["launch.job"]))
    if role in ("generator", "colocated") and engine is not None:
        names += _BY_ENGINE.get(engine, [])
    return list(dict.fromkeys(names))


def warm_imports(role: str, engine: str | None, hide: tuple[str, ...] = ()) -> list[str]:
    """Import ``modules_for(role, engine)``; return those that failed (their build will say why).

    ``hide``: packages (see :func:`unused_optional_packages`) that transformers is to find
    missing while these imports run, and so never import; afterwards they import as usual."""
    failed = []
    with _hidden(hide):
        for name in modules_for(role, engine):
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - the build imports it again and reports the error there
                failed.append(name)
    return failed


def unused_optional_packages(cfg) -> tuple[str, ...]:
    """Installed packages that transformers imports as soon as it finds them, which this job's
    ranks will not use.

    torchao: ``transformers.modeling_utils`` imports it whenever it is installed. mpirl uses it
    only for the torch engine's int8 generation, a checkpoint saved quantized and vLLM's own
    schemes; anything else keeps it.
    """
    generator = cfg.world.generator
    if generator.engine == "vllm" or generator.quantization is not None or _saved_quantized(cfg.model.path):
        return ()
    return ("torchao",)


def _saved_quantized(model_path) -> bool:
    """True if the folder's config.json declares a quantization, or cannot be read (no guess:
    the build reads it again and says what is wrong)."""
    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return True
    return not isinstance(config, dict) or "quantization_config" in config


@contextlib.contextmanager
def _hidden(names: tuple[str, ...]):
    """While inside, the packages ``names`` not yet imported are missing: a None in
    ``sys.modules`` makes ``import`` raise ModuleNotFoundError and ``importlib.util.find_spec``
    (transformers' availability checks) return None. transformers caches what its checks
    found, so it goes on taking them for missing; mpirl's own imports of them work after."""
    hidden = [name for name in names if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None
    try:
        yield
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
