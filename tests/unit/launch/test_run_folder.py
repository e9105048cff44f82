"""launch/run_folder.py: the role map a job started with, copied into run.out/config.yaml."""

from __future__ import annotations

from launch.run_folder import record_role_map


def test_the_role_map_is_copied_as_written_and_replaced_on_the_next_start(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    source = tmp_path / "job.yaml"
    source.write_text("# my job\nrun: {steps: 5, out: run}\n")
    assert record_role_map(source, out) == out / "config.yaml"
    assert (out / "config.yaml").read_text() == source.read_text()  # comments and all
    source.write_text("run: {steps: 9, out: run}\n")  # resumed with more steps
    record_role_map(source, out)
    assert (out / "config.yaml").read_text() == "run: {steps: 9, out: run}\n"
    assert sorted(p.name for p in out.iterdir()) == ["config.yaml"]  # no temporary file left


def test_a_role_map_already_in_run_out_is_left_alone(tmp_path):
    source = tmp_path / "config.yaml"
    source.write_text("run: {out: .}\n")
    assert record_role_map(source, tmp_path) is None
    assert source.read_text() == "run: {out: .}\n"
