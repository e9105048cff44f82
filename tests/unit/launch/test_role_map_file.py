"""launch.role_map_file: a role-map file is read as users write YAML, and a broken or hostile one
is refused in one line naming the file, before validation."""

from __future__ import annotations

import pytest

from launch import preflight, role_map_file
from launch.config import ConfigError


def test_yaml_strings_stay_strings():
    data = role_map_file.load_yaml("a: 1e-5\nb: e5\nc: '1e-5'\nd: 1.2.3\ne: 12\nf: true\n")
    assert data == {"a": 1e-5, "b": "e5", "c": "1e-5", "d": "1.2.3", "e": 12, "f": True}


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="no role-map file at"):
        preflight.load(tmp_path / "nope.yaml")


def test_invalid_yaml(write_config):
    with pytest.raises(ConfigError, match="not valid YAML"):
        preflight.load(write_config("world: {controller: 1\nrun: [\n"))


@pytest.mark.parametrize(
    "text, key, lines",
    [
        ("run: {steps: 5, seed: 1}\nworld: {controller: 1}\nrun:\n  steps: 7\n", "run", (1, 3)),
        ("run:\n  steps: 3\n  steps: 7\n", "steps", (2, 3)),
    ],
)
def test_a_key_written_twice_is_refused_naming_both_lines(tmp_path, text, key, lines):
    # PyYAML keeps the last: a second run: block replaced the first one whole, silently.
    path = tmp_path / "job.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"duplicate key '{key}' \(first at line {lines[0]}\) at line {lines[1]}"):
        role_map_file.read_yaml_file(path)


def test_a_merge_may_still_be_overridden():
    data = role_map_file.load_yaml("base: &b {lr: 1.0e-5, rho: 4.0}\nalgorithm:\n  <<: *b\n  rho: 2.0\n")
    assert data["algorithm"] == {"lr": 1e-5, "rho": 2.0}


def test_a_role_map_path_too_long_is_a_config_error():
    with pytest.raises(ConfigError, match="cannot look for a role-map file.*File name too long"):
        preflight.load("r" * 5000 + ".yaml")


@pytest.mark.parametrize(
    "content, message",
    [
        (b"run: {steps: 3}\nmodel: {path: \xff\xfe}\n", "not UTF-8 text (byte 30 is 0xff)"),
        (b"[" * 20000 + b"]" * 20000, "nested"),
        (b"a: " + b"[" * 200 + b"]" * 200, "nested more than"),
        (
            b"a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
            b"c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
            b"e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n",
            "expands to more than",
        ),
        (b"- just\n- a list\n", "a role map is a YAML mapping, got list"),
        (b"42\n", "a role map is a YAML mapping, got int"),
        (b"", "a role map is a YAML mapping, got NoneType"),
        (b"run: {steps: 3\n", "not valid YAML"),
        (b"? [a, b]\n: 1\n", "not valid YAML: found unhashable key at line 1, column 3 (while constructing a mapping)"),
        (b"run: {steps: 3\n", "not valid YAML: expected ',' or '}', but got '<stream end>' at line 2, column 1"),
    ],
)
def test_a_broken_file_is_one_clear_line(tmp_path, content, message):
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as e:
        preflight.load(path)
    assert message in str(e.value) and str(path) in str(e.value)
    assert "\n" not in str(e.value)  # one line


def test_a_huge_file_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_bytes(b"# padding\n" * (role_map_file.MAX_FILE_BYTES // 10 + 1))
    with pytest.raises(ConfigError, match="a role map is at most"):
        preflight.load(path)
