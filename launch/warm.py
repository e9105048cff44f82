"""Import ahead what a rank's role will need, while rank 0 prepares the data.

Start-up is mostly imports: torch, transformers' modelling code and the role's own modules
take seconds of CPU per rank. Rank 0 prepares the data (launch/main.py) while the other ranks
wait for its verdict; importing their modules in that wait makes the two overlap instead of
adding up (``start.preflight`` in a run's trace).

Only imports: nothing is built, no file of the run is read, and a failure here is left for
the real build to raise, with the rank and role named as usual.
"""

from __future__ import annotations

import importlib

# The modules each role's build imports (launch/job.py), the slowest first.
_BY_ROLE = {
    "generator": ["launch.job", "roles.generator"],
    "trainer": ["launch.job", "transformers.models.auto.modeling_auto", "roles.policy", "roles.trainer"],
    "reward": [  # no torch: the tokenizer's class comes from the controller (roles/tokenizer.py)
        "launch.job",
        "transformers.tokenization_utils_tokenizers",
        "roles.tokenizer",
        "roles.reward",
        "roles.rewards.sandbox",
        "roles.tasks",
    ],
    "colocated": ["launch.job", "transformers.models.auto.modeling_auto", "roles.policy", "roles.colocated"],
}
_BY_ENGINE = {
    "torch": ["transformers.models.auto.modeling_auto", "roles.engines.torch_engine"],
    "vllm": ["roles.engines.vllm_engine", "vllm"],
    "sim": ["roles.engines.sim_engine"],
}


def modules_for(role: str, engine: str | None) -> list[str]:
    """What ``role``'s build will import (``engine``: the generator engine, for roles that generate)."""
    names = list(_BY_ROLE.get(role, ["launch.job"]))
    if role in ("generator", "colocated") and engine is not None:
        names += _BY_ENGINE.get(engine, [])
    return list(dict.fromkeys(names))


def warm_imports(role: str, engine: str | None) -> list[str]:
    """Import ``modules_for(role, engine)``; return those that failed (their build will say why)."""
    failed = []
    for name in modules_for(role, engine):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the build imports it again and reports the error there
            failed.append(name)
    return failed
