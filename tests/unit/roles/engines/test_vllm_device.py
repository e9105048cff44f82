"""roles.engines.vllm_device.check_device: a dtype or quantization the generator's device
cannot run is refused before vLLM loads anything, naming the role map's field."""

from __future__ import annotations

import pytest
import torch

from roles.engines.vllm_device import DeviceUnsupported, check_device


class FakeGPU:
    """A stand-in for vLLM's ``current_platform`` on a CUDA GPU of compute capability ``cap``."""

    device_name = "cuda"
    supported_dtypes = [torch.bfloat16, torch.float16, torch.float32]

    def __init__(self, cap: tuple[int, int]):
        from vllm.platforms.interface import DeviceCapability

        self.cap = DeviceCapability(*cap)

    def is_cuda_alike(self) -> bool:
        return True

    def get_device_capability(self):
        return self.cap

    def has_device_capability(self, needed: int) -> bool:
        return self.cap.major * 10 + self.cap.minor >= needed


class FakeOldGPU(FakeGPU):
    supported_dtypes = [torch.float16, torch.float32]  # as vLLM reports a pre-Ampere one


def test_this_cpu_runs_every_dtype_and_refuses_fp8_naming_the_field():
    from vllm.platforms import current_platform

    assert current_platform.is_cpu()
    for dtype in ("float32", "bfloat16"):
        check_device(dtype, None, current_platform)
    with pytest.raises(
        DeviceUnsupported, match=r"world.generator.quantization 'fp8': .*CUDA GPUs only.*quantization: int8"
    ):
        check_device("float32", "fp8", current_platform)


def test_bfloat16_on_a_gpu_older_than_ampere_is_refused():
    check_device("bfloat16", None, FakeGPU((8, 0)))
    with pytest.raises(
        DeviceUnsupported, match=r"world.generator.dtype 'bfloat16' needs .* 8.0 .* this one is 7.0: use float16"
    ):
        check_device("bfloat16", None, FakeGPU((7, 0)))
    with pytest.raises(
        DeviceUnsupported, match=r"world.generator.dtype 'bfloat16': vLLM on this device \(cuda\) runs float16, float32"
    ):
        check_device("bfloat16", None, FakeOldGPU((7, 0)))


def test_fp8_needs_the_capability_vllm_states_for_it():
    from vllm.model_executor.layers.quantization import get_quantization_config

    needed = get_quantization_config("fp8").get_min_capability()
    ok = (needed // 10, needed % 10)
    check_device("float16", "fp8", FakeGPU(ok))
    too_old = (needed // 10 - 1, 0)
    with pytest.raises(
        DeviceUnsupported, match=rf"quantization 'fp8' needs .* {ok[0]}.{ok[1]} or more; this one is {too_old[0]}.0"
    ):
        check_device("float16", "fp8", FakeGPU(too_old))


@pytest.mark.parametrize(
    "shape, refused",
    [
        ({"hidden_size": 32, "num_attention_heads": 2}, True),
        ({"hidden_size": 128, "num_attention_heads": 2}, False),
        ({"n_embd": 64, "n_head": 4}, True),  # GPT-2's names
        ({"hidden_size": 32, "num_attention_heads": 2, "head_dim": 64}, False),
    ],
)
def test_a_head_size_the_cpu_backend_cannot_run_is_refused_at_build(tmp_path, shape, refused):
    import json

    from roles.engines.vllm_device import check_cpu_head_size

    (tmp_path / "config.json").write_text(json.dumps(shape))
    if refused:
        with pytest.raises(DeviceUnsupported, match="heads are 16 wide.*engine: torch"):
            check_cpu_head_size(str(tmp_path))
    else:
        check_cpu_head_size(str(tmp_path))
