"""launch.preflight.model_files: a damaged or cut-short safetensors file in the model folder, or an index
naming what is not there, is a config error of the preflight and ``mpirl check`` (exit 2),
found from the headers alone, not a crash of every model rank at load."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from launch import config, preflight
from launch.preflight import model_files
from launch.preflight.data import prepare_data
from launch.preflight.model_files import WeightFileError, check_weight_files, read_header
from support.mpi_helpers import REPO


def write_weights(path, tensors=None):
    tensors = tensors or {
        "embed.weight": np.zeros((64, 16), np.float32),
        "norm.weight": np.ones(16, np.float16),
        "mask": np.ones(5, np.bool_),
    }
    save_file(tensors, str(path), metadata={"format": "pt"})
    return path


def with_header(path, header: dict, data: bytes) -> None:
    text = json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + data)


def library_refuses(path) -> bool:
    """Whether the safetensors library itself refuses to open ``path`` (what the loaders use)."""
    try:
        with safe_open(str(path), "numpy") as f:
            for k in f.keys():
                f.get_tensor(k)
    except Exception:  # noqa: BLE001 - any refusal will do
        return True
    return False


def test_a_whole_file_reads_from_its_header(tmp_path):
    f = write_weights(tmp_path / "model.safetensors")
    tensors = read_header(f)
    assert {k: (t.dtype, t.shape) for k, t in tensors.items()} == {
        "embed.weight": ("F32", (64, 16)),
        "norm.weight": ("F16", (16,)),
        "mask": ("BOOL", (5,)),
    }
    assert check_weight_files(tmp_path) == 1


def _truncate(f):
    f.write_bytes(f.read_bytes()[:1000])


def _garbage_length(f):
    f.write_bytes(b"\xff" * 8 + f.read_bytes()[8:])


def _not_json(f):
    raw = f.read_bytes()
    f.write_bytes(raw[:8] + b"<" + raw[9:])


def _extra_bytes(f):
    f.write_bytes(f.read_bytes() + b"\0" * 10)


def _wrong_size(f):
    with_header(f, {"w": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 60]}}, b"\0" * 60)


def _gap(f):
    header = {
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [12, 20]},
    }
    with_header(f, header, b"\0" * 20)


def _unknown_dtype(f):
    with_header(f, {"w": {"dtype": "F128", "shape": [2], "data_offsets": [0, 32]}}, b"\0" * 32)


def _tiny(f):
    f.write_bytes(b"\x01\x02\x03")


@pytest.mark.parametrize(
    "damage, expected",
    [
        (_truncate, r"truncated: its header says 4,\d{3} bytes, the file has 1,000$"),
        (_garbage_length, r"not a safetensors file: .* header of 18,446,744,073,709,551,615 bytes"),
        (_not_json, "damaged: its header is not JSON"),
        (_extra_bytes, r"damaged: its header says \S+ bytes, the file has \S+ \(10 bytes that no tensor holds\)"),
        (_wrong_size, r"tensor 'w' \(F32, shape \[4, 4\]\) needs 64 bytes, its data_offsets \[0, 60\] hold 60"),
        (_gap, r"tensor 'b' begins at byte 12 of the data, not right after tensor 'a', which ends at 8"),
        (_unknown_dtype, r"tensor 'w': unknown dtype 'F128'"),
        (_tiny, r"truncated: 3 bytes, too short"),
    ],
)
def test_a_damaged_file_is_named_with_what_is_wrong(tmp_path, damage, expected):
    f = write_weights(tmp_path / "model-00001-of-00002.safetensors")
    damage(f)
    assert library_refuses(f)  # nothing the loaders would accept is refused here
    with pytest.raises(WeightFileError, match=expected) as e:
        check_weight_files(tmp_path)
    assert str(e.value).startswith(f"{f}: ")


def test_every_dtype_size_agrees_with_the_library(tmp_path):
    arrays = {
        "f64": np.zeros(3, np.float64),
        "i64": np.zeros((2, 3), np.int64),
        "u16": np.zeros(7, np.uint16),
        "i8": np.zeros((3, 0), np.int8),  # empty: begin == end
        "c64": np.zeros(2, np.complex64),
        "scalar": np.zeros((), np.int32),
    }
    f = write_weights(tmp_path / "w.safetensors", arrays)
    assert not library_refuses(f)
    assert {k: t.elements for k, t in read_header(f).items()} == {k: a.size for k, a in arrays.items()}


def test_an_index_must_name_files_and_tensors_that_are_there(tmp_path):
    write_weights(tmp_path / "model-00001-of-00002.safetensors", {"a": np.zeros(2, np.float32)})
    write_weights(tmp_path / "model-00002-of-00002.safetensors", {"b": np.zeros(2, np.float32)})
    index = tmp_path / "model.safetensors.index.json"

    def write_index(weight_map):
        index.write_text(json.dumps({"metadata": {"total_size": 16}, "weight_map": weight_map}))

    write_index({"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"})
    assert check_weight_files(tmp_path) == 2
    write_index({"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors"})
    first = "'model-00001-of-00002.safetensors'"
    with pytest.raises(WeightFileError, match=rf"maps tensors to {first} that it does not hold: 'b'"):
        check_weight_files(tmp_path)
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    write_index({"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"})
    gone = r"names 'model-00002-of-00002.safetensors' for 1 tensor \(e.g. 'b'\), but there is no such file"
    with pytest.raises(WeightFileError, match=gone):
        check_weight_files(tmp_path)
    index.write_text("{")
    with pytest.raises(WeightFileError, match="cannot read it as JSON"):
        check_weight_files(tmp_path)


def test_a_folder_without_weights_is_refused(tmp_path):
    # Only a config and a tokenizer (a download stopped early, the wrong folder): it passed,
    # and every model rank then failed to load it with a traceback.
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(WeightFileError, match=rf"^{tmp_path}: holds no weights \(no \*\.safetensors"):
        check_weight_files(tmp_path)


@pytest.mark.parametrize("name", ["pytorch_model.bin", "pytorch_model.bin.index.json"])
def test_torch_format_weights_are_left_to_their_loader(tmp_path, name):
    (tmp_path / name).write_bytes(b"not read here")
    assert check_weight_files(tmp_path) == 0


def test_an_unknown_model_type_is_refused_with_the_close_names(base_config, dummy_model):
    (dummy_model / "config.json").write_text('{"model_type": "lama"}')
    cfg = preflight.parse(base_config)
    with pytest.raises(
        config.ConfigError, match=r"model_type 'lama' is not one this transformers knows \(close: llama"
    ):
        prepare_data(cfg)


def test_a_known_type_is_found_without_importing_transformers():
    code = (
        "import sys; from launch.preflight.model_files import transformers_model_types; "
        "assert {'llama', 'qwen2', 'gpt2', 'mistral'} <= set(transformers_model_types('llama')); "
        "assert 'transformers' not in sys.modules and 'torch' not in sys.modules"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]


def test_a_type_outside_the_generated_table_is_asked_of_transformers_itself():
    # gpt-sw3 is added to the mapping outside the table; a plug-in may register its own.
    from transformers import AutoConfig, LlamaConfig

    class FrobConfig(LlamaConfig):
        model_type = "frobnicator-test"

    AutoConfig.register("frobnicator-test", FrobConfig)
    for name in ("gpt-sw3", "frobnicator-test"):
        assert name not in model_files._generated_model_types()
        assert name in model_files.transformers_model_types(name)


def test_a_transformers_that_cannot_tell_refuses_no_type(monkeypatch, tmp_path):
    monkeypatch.setattr(model_files, "_generated_model_types", lambda: None)
    monkeypatch.setitem(sys.modules, "transformers.models.auto.configuration_auto", None)  # import fails
    (tmp_path / "config.json").write_text('{"model_type": "frobnicator"}')
    assert model_files.check_config_file(tmp_path)["model_type"] == "frobnicator"


def test_vllm_generators_need_safetensors(base_config, dummy_model):
    (dummy_model / "model.safetensors").unlink()
    (dummy_model / "pytorch_model.bin").write_bytes(b"not read here")
    prepare_data(preflight.parse(base_config))  # the torch engine loads it
    base_config["world"]["generator"] = {"ranks": 1, "engine": "vllm"}
    with pytest.raises(config.ConfigError, match=r"^world\.generator\.engine: vllm reads safetensors weights"):
        prepare_data(preflight.parse(base_config))


# ------------------------------------------------------------ the preflight and mpirl check


def test_the_preflight_refuses_a_truncated_file_naming_it(base_config, dummy_model):
    f = write_weights(dummy_model / "model.safetensors")
    _truncate(f)
    cfg = preflight.parse(base_config)  # the role map's own checks pass: sizing just has no estimate
    with pytest.raises(config.ConfigError, match=rf"^model\.path: {f}: truncated: its header says"):
        prepare_data(cfg)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b'{"model_type": "llama",', r"not valid JSON \(Expecting property name"),
        (b"[1, 2]", r"a JSON list, not an object"),
        (b'{"hidden_size": 64}', r"no model_type \(got None\): transformers cannot tell which model class"),
        (b'{"model_type": ""}', r"no model_type \(got ''\)"),
        (b'\xef\xbb\xbf{"model_type": "llama"}', r"starts with a byte-order mark"),
        (b'{"model_type": "caf\xe9"}', r"not UTF-8 text \(invalid continuation byte at byte 19\)"),
    ],
)
def test_the_preflight_refuses_a_config_json_no_loader_can_use(base_config, dummy_model, content, problem):
    # Before the tokenizer: its loader failed on these as "cannot load a tokenizer", or (no
    # model_type) passed, and every model rank stopped later with a traceback.
    (dummy_model / "config.json").write_bytes(content)
    cfg = preflight.parse(base_config)
    with pytest.raises(config.ConfigError, match=rf"^model\.path: {dummy_model / 'config.json'}: {problem}"):
        prepare_data(cfg)


def test_mpirl_check_exits_2_naming_the_damaged_file(base_config, dummy_model, write_config):
    f = write_weights(dummy_model / "model.safetensors")
    _truncate(f)
    run = subprocess.run(
        [sys.executable, "-m", "launch.cli", "check", str(write_config(base_config))],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Traceback" not in run.stderr and f"model.path: {f}: truncated" in run.stderr, run.stderr


def test_the_check_reads_headers_only(tmp_path, monkeypatch):
    """A large file costs its header: nothing past it is read."""
    f = write_weights(tmp_path / "big.safetensors", {"w": np.zeros((1024, 1024), np.float32)})
    n = 8 + int.from_bytes(f.read_bytes()[:8], "little")
    real_open = open
    read = []

    class Counting:
        def __init__(self, fh):
            self.fh = fh

        def read(self, size=-1):
            assert size >= 0, "a read to the end of the file"
            data = self.fh.read(size)
            read.append(len(data))
            return data

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

    monkeypatch.setattr("builtins.open", lambda p, mode="r", *a, **k: Counting(real_open(p, mode, *a, **k)))
    read_header(f)
    assert sum(read) == n


def test_the_check_imports_no_torch(tmp_path):
    """It runs on the controller's rank, which must start without torch (docs/log.md)."""
    write_weights(tmp_path / "model.safetensors")
    code = (
        "import sys; from launch.preflight.data import check_model_files; "
        "from launch.preflight.model_files import check_weight_files; "
        f"assert check_weight_files({str(tmp_path)!r}) == 1; "
        "assert 'torch' not in sys.modules, 'torch was imported'; "
        "assert 'transformers' not in sys.modules, 'transformers was imported'"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
