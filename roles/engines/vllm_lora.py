"""vLLM's own LoRA for a LoRA run's generator (``world.generator.lora_mode: native``): the engine
holds the base as loaded and applies each sync's adapters in its LoRA layers (punica kernels:
CPU and GPU), instead of a merged full reload (``adapter_merge``).

Each sync writes the adapters as a PEFT adapter folder (on tmpfs where there is one) and loads it
into the engine's one adapter slot *in place* (``LoRARequest(load_inplace=True)``, id 1). In
place, rather than a new id per version, because of the streaming engine's ``inflight_kv: keep``:
a request's adapter id is fixed when it is added, so under a new id the sequences in flight
would go on sampling with the old adapter while their tokens were recorded under the new
version. In place they decode on with the new adapter over their old KV, as with a merged
reload. The requests carry a ``LoRARequest`` named after the version (``mpirl-v7``, its folder's
path): vLLM hashes the adapter's name and path into every KV block, so no block computed under
one version is served to another (on top of the engine's prefix-cache reset and salts). Version 0
(no sync yet: the adapters' B is 0, the base) runs without an adapter.

Knows vLLM's LoRA API and folders; nothing of messages or of the weight transport.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

import torch

from roles.models.lora import LoraConfig, is_adapter, write_adapter_folder

SLOT = 1  # the adapter id every version is loaded under (in place)
_VLLM_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's allowed max_lora_rank values


def engine_args(config: LoraConfig) -> dict:
    """``vllm.LLM`` keyword arguments for one adapter of ``config``'s rank."""
    fits = [r for r in _VLLM_RANKS if r >= config.rank]
    if not fits:
        raise ValueError(f"lora.rank {config.rank}: vLLM's LoRA takes ranks up to {_VLLM_RANKS[-1]}")
    return {"enable_lora": True, "max_lora_rank": fits[0], "max_loras": 1, "max_cpu_loras": 1}


class NativeAdapters:
    """The adapters of the version the engine holds, as vLLM's LoRA loads them (see module doc)."""

    def __init__(self, config: LoraConfig, base_path: str):
        self.config = config
        self.base_path = base_path
        shm = Path("/dev/shm")
        self.root = Path(tempfile.mkdtemp(prefix="mpirl-lora-", dir=shm if shm.is_dir() else None))
        self.request = None  # what requests carry (None: version 0, the base)
        self._folders: list[Path] = []

    def load(self, engine, adapters: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Write ``adapters`` (``X.lora_A.default.weight``, ...) and load them into ``engine`` (an
        ``LLMEngine``) in place of the last version's."""
        from vllm.lora.request import LoRARequest

        state = dict(adapters)
        if not state or not all(map(is_adapter, state)):
            others = [n for n in state if not is_adapter(n)][:3]
            got = f"also {others}" if others else "none"
            raise KeyError(f"vLLM's LoRA takes the adapters alone (X.lora_A.default.weight, ...); got {got}")
        folder = write_adapter_folder(state, self.config, self.base_path, self.root / f"v{version}")
        name = f"mpirl-v{version}"
        if not engine.add_lora(LoRARequest(name, SLOT, str(folder), load_inplace=True)):
            raise RuntimeError(f"vLLM did not load the adapters of version {version} ({folder})")
        self.request = LoRARequest(name, SLOT, str(folder))  # no load_inplace: not reloaded per step
        if folder not in self._folders:  # the same version again (a resume's push) rewrote it
            self._folders.append(folder)
        while len(self._folders) > 2:  # vLLM has read it; the one before stays for a moment's safety
            shutil.rmtree(self._folders.pop(0), ignore_errors=True)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def __del__(self):
        self.close()
