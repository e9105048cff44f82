"""mpirl trace / report / advise on damaged and unusual run folders.

The rule: bad input is one line on stderr naming the file and the problem, exit code 2, no
traceback, nothing already there lost; a damaged line is skipped and said, never a crash. The
run folders are synthetic (what the controller and each rank write), so no run is needed.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import yaml

from launch import cli
from runtime.spans import Spans
from support.mpi_helpers import REPO

WORLD = {"controller": 1, "generator": 1, "reward": 1, "trainer": 1}


def metrics_line(step: int) -> dict:
    return {
        "step": step,
        "reward_mean": 0.4 + 0.01 * step,
        "tokens": 300,
        "step_s": 0.5,
        "generation_s": 0.3,
        "reward_s": 0.05,
        "training_s": 0.4,
        "elapsed_s": 0.5 * (step + 1),
    }


def make_run(path, steps: int = 5, world: dict | None = None):
    """A finished run: its role map, metrics, summary and the span files of its four ranks."""
    path.mkdir(parents=True)
    config = {"world": world or WORLD, "rollout": {"prompts_per_step": 4}, "run": {"steps": steps, "max_staleness": 1}}
    (path / "config.yaml").write_text(yaml.safe_dump(config))
    (path / "metrics.jsonl").write_text("".join(json.dumps(metrics_line(s)) + "\n" for s in range(steps)))
    (path / "summary.json").write_text(json.dumps({"steps": steps, "wall_s": 0.5 * steps + 1}))
    for rank, role in enumerate(("controller", "generator", "reward", "trainer")):
        spans = Spans(rank, role, 0)
        for s in range(steps):
            spans.add(
                {"generator": "generate", "reward": "score", "trainer": "train"}.get(role, "wait"), 100.0 + s, 100.5 + s
            )
        spans.write(path)
    return path


def run_cli(argv, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return info.value.code, out, err


def assert_one_line_exit_2(argv, capsys, *words) -> str:
    code, out, err = run_cli(argv, capsys)
    assert code == 2 and out == "", err
    assert err.count("\n") == 1 and err.startswith("mpirl: "), err
    for word in words:
        assert word in err, err
    return err


# ----------------------------------------------------------------------------- not a run folder


@pytest.mark.parametrize("command", ["trace", "report", "advise"])
def test_a_file_given_for_the_run_folder_is_called_a_file(tmp_path, capsys, command):
    # It was "no such folder" (report, advise), or "no spans in FILE/spans" (trace): a user
    # looking at a file that exists would look for a typo.
    f = tmp_path / "metrics.jsonl"
    f.write_text(json.dumps(metrics_line(0)) + "\n")
    assert_one_line_exit_2([command, f], capsys, str(f), "a file")


def test_trace_of_a_folder_that_does_not_exist_says_so(tmp_path, capsys):
    assert_one_line_exit_2(["trace", tmp_path / "nope"], capsys, "nope: no such folder")


# ----------------------------------------------------------------------------- mpirl trace


def test_spans_of_wrong_types_or_not_finite_are_skipped_and_said(tmp_path, capsys):
    run = make_run(tmp_path / "run")
    f = run / "spans" / "rank-0001.jsonl"
    lines = [json.loads(x) for x in f.read_text().splitlines()]
    # Was: a TypeError traceback (a string time), or every event at ts Infinity and a
    # trace.json that is not JSON (a -Infinity start made t0 -inf).
    lines[1]["start"] = "100.0"
    lines[2]["start"] = -math.inf
    lines[3]["end"] = math.nan
    lines[4]["name"] = 5
    good = "".join(json.dumps(x) + "\n" for x in lines).encode()
    # A byte that is not UTF-8, and a last line cut short by a kill.
    f.write_bytes(good + b'{"name": "gen\xff", "start": 101.0, "end": 102.0}\n{"name": "cut", "sta')
    code, out, err = run_cli(["trace", run], capsys)
    assert code == 0, err
    assert f"{f}: 6 undecodable or incomplete lines skipped" in err
    trace = json.loads((run / "trace.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in trace.json"))
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(events) == 3 * 5 + 1  # the other ranks whole, and rank 1's one good span
    assert all(0 <= e["ts"] < 10e6 for e in events)


@pytest.mark.parametrize(
    "header",
    ['{"role": "generator"}', '{"rank": "1", "role": "generator", "index": 0}', "[1, 2]", ""],
)
def test_a_span_file_without_a_usable_header_is_left_out_and_named(tmp_path, capsys, header):
    run = make_run(tmp_path / "run")
    f = run / "spans" / "rank-0001.jsonl"
    f.write_text(header + "\n" + "".join(f.read_text().splitlines(keepends=True)[1:]))
    code, _, err = run_cli(["trace", run], capsys)  # was: KeyError: 'rank'
    assert code == 0, err
    assert f"{f}: no header line" in err and "no spans of rank 1" in err
    names = {e["args"]["name"] for e in json.loads((run / "trace.json").read_text())["traceEvents"] if e["ph"] == "M"}
    assert names == {"rank 0: controller 0", "rank 2: reward 0", "rank 3: trainer 0"}


def test_a_missing_rank_is_named_even_the_last(tmp_path, capsys):
    run = make_run(tmp_path / "run")
    (run / "spans" / "rank-0003.jsonl").unlink()  # config.yaml says 4 ranks
    code, _, err = run_cli(["trace", run], capsys)
    assert code == 0 and "no spans of rank 3" in err, err


def test_a_folder_where_a_span_file_should_be_is_left_out_not_fatal(tmp_path, capsys):
    run = make_run(tmp_path / "run")
    (run / "spans" / "rank-0002.jsonl").unlink()
    (run / "spans" / "rank-0002.jsonl").mkdir()
    code, _, err = run_cli(["trace", run], capsys)  # was: IsADirectoryError traceback
    assert code == 0 and "rank-0002.jsonl: unreadable" in err, err


def test_a_config_yaml_with_a_key_written_twice_is_read_as_the_launcher_reads_it(tmp_path, capsys):
    # The launcher refuses a key written twice; plain yaml.safe_load keeps the last, and advise
    # sized its advice from a second world: block the run never had.
    run = make_run(tmp_path / "run")
    text = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(text + "\nworld: {controller: 1, generator: 9, reward: 9, trainer: 9}\n")
    assert_one_line_exit_2(["advise", run], capsys, "config.yaml")
    code, out, err = run_cli(["report", run], capsys)
    assert code == 0, err
    page = (run / "report" / "report.md").read_text()
    assert "config.yaml: present but does not parse (duplicate key 'world'" in page


@pytest.mark.parametrize("in_the_way", ["trace.json", "timeline.png"])
def test_trace_that_cannot_write_its_files_exits_2(tmp_path, capsys, in_the_way):
    run = make_run(tmp_path / "run")
    (run / in_the_way).mkdir()
    assert_one_line_exit_2(["trace", run], capsys, in_the_way, "cannot write the trace")


# ----------------------------------------------------------------------------- mpirl report


def test_a_config_yaml_that_is_not_utf8_is_a_note_not_a_traceback(tmp_path, capsys):
    run = make_run(tmp_path / "run")
    (run / "config.yaml").write_bytes(b"world: \xff\xfe\n")
    code, out, err = run_cli(["report", run], capsys)  # was: UnicodeDecodeError traceback
    assert code == 0, err
    assert "config.yaml: present but does not parse" in (run / "report" / "report.md").read_text()
    # advise named no file: "'utf-8' codec can't decode byte 0xff in position 7"
    assert_one_line_exit_2(["advise", run], capsys, "config.yaml")


def test_a_metrics_line_that_is_not_utf8_is_counted_as_undecodable(tmp_path, capsys):
    run = make_run(tmp_path / "run")
    text = (run / "metrics.jsonl").read_bytes()
    # A damaged byte in a key: read with errors="replace", the line was taken whole, its
    # reward silently gone, and the page said "every line read".
    (run / "metrics.jsonl").write_bytes(text.replace(b'"reward_mean"', b'"rew\xe9ard_mean"', 1))
    code, _, err = run_cli(["report", run], capsys)
    assert code == 0, err
    assert "metrics.jsonl: 1 undecodable line skipped (line 1)" in (run / "report" / "report.md").read_text()


@pytest.mark.parametrize("in_the_way", ["report.md", "reward.png", "ratios.png"])
def test_report_that_cannot_write_its_files_exits_2(tmp_path, capsys, in_the_way):
    run = make_run(tmp_path / "run")
    (run / "report" / in_the_way).mkdir(parents=True)  # ratios.png: a figure this run skips
    assert_one_line_exit_2(["report", run], capsys, in_the_way)


def test_report_does_not_write_over_a_page_it_did_not_write(tmp_path, capsys):
    run = make_run(tmp_path / "run")
    out = tmp_path / "notes"
    out.mkdir()
    (out / "report.md").write_text("my notes\n")
    (out / "todo.txt").write_text("keep\n")
    assert_one_line_exit_2(["report", run, "--out", out], capsys, str(out), "report.md")
    assert (out / "report.md").read_text() == "my notes\n" and sorted(p.name for p in out.iterdir()) == [
        "report.md",
        "todo.txt",
    ]
    (out / "report.md").unlink()
    (out / "loss.png").write_bytes(b"my picture")
    assert_one_line_exit_2(["report", run, "--out", out], capsys, "loss.png")
    assert (out / "loss.png").read_bytes() == b"my picture"
    # Beside other files, and over its own earlier report, it writes.
    (out / "loss.png").unlink()
    for _ in range(2):
        code, out_text, err = run_cli(["report", run, "--out", out], capsys)
        assert code == 0 and out_text.strip() == str(out / "report.md"), err
    assert (out / "todo.txt").read_text() == "keep\n"


def test_an_out_that_is_a_file_is_called_a_file(tmp_path, capsys):
    run = make_run(tmp_path / "run")
    f = tmp_path / "afile"
    f.write_text("keep\n")
    assert_one_line_exit_2(["report", run, "--out", f], capsys, "a file, not a folder")
    assert f.read_text() == "keep\n"


def test_the_same_run_twice_keeps_its_name(tmp_path, capsys):
    run = make_run(tmp_path / "run")
    code, _, err = run_cli(["report", run, tmp_path / "." / "run", "--out", tmp_path / "cmp"], capsys)
    assert code == 0, err
    page = (tmp_path / "cmp" / "report.md").read_text()
    assert page.splitlines()[0] == "# Run report: run, run (2)"  # was: //tmp/.../run, //tmp/.../run (2)
    assert "//" not in page


def test_a_summary_with_steps_true_is_not_a_step_number(tmp_path, capsys):
    run = make_run(tmp_path / "run")
    (run / "summary.json").write_text(json.dumps({"steps": True, "wall_s": 3.5}))
    code, _, err = run_cli(["report", run], capsys)
    assert code == 0, err
    page = (run / "report" / "report.md").read_text()
    assert "step True" not in page and "| status | finished |" in page


# ----------------------------------------------------------------------------- mpirl advise


def test_advise_says_which_lines_it_skipped(tmp_path, capsys):
    run = make_run(tmp_path / "run")
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "generation_s": 0.')  # a crash while writing
    code, out, err = run_cli(["advise", run], capsys)
    assert code == 0, err
    assert "metrics.jsonl: the last line (line 6) is cut short" in out


def test_advise_on_timings_that_are_not_numbers_says_so(tmp_path, capsys):
    run = make_run(tmp_path / "run")
    lines = [{**metrics_line(s), "generation_s": math.nan if s % 2 else "fast"} for s in range(3)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert_one_line_exit_2(["advise", run], capsys, "no step has a number for generation_s")


@pytest.mark.parametrize("how", ["world", "--ranks"])
def test_advise_on_a_huge_layout_answers_in_seconds(tmp_path, capsys, how):
    # The search over splits was quadratic in the ranks: 100,000 ranks kept it busy for hours.
    world = {**WORLD, "generator": 100_000} if how == "world" else None
    run = make_run(tmp_path / "run", world=world)
    argv = ["advise", str(run)] + (["--ranks", "1000000"] if how == "--ranks" else [])
    # In a process of its own, so that a search that does not end fails the test instead of hanging it.
    cli_run = subprocess.run(
        [sys.executable, "-m", "launch.cli", *argv], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    code, out, err = cli_run.returncode, cli_run.stdout, cli_run.stderr
    assert code == 0, err
    advised = next(line for line in out.splitlines() if line.startswith("advised split"))
    trainers = int(advised.split("trainer ")[1].split()[0])
    assert 4 % trainers == 0  # a layout the role map accepts (prompts_per_step 4)


def test_advice_without_prompts_per_step_divides_the_default(tmp_path, capsys):
    # No rollout.prompts_per_step in the role map: the run had the default, 16, which the trainer
    # count must divide (mpirl check refuses 3 trainers of it); the advice was 3 of 5 ranks.
    run = make_run(tmp_path / "run")
    config = yaml.safe_load((run / "config.yaml").read_text())
    del config["rollout"]
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    lines = [{**metrics_line(s), "generation_s": 0.01, "reward_s": 0.01, "training_s": 3.0} for s in range(3)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    code, out, err = run_cli(["advise", run, "--ranks", "5"], capsys)
    assert code == 0, err
    assert "advised split   generator 1, reward 2, trainer 2 (of 5 compute ranks)" in out, out


@pytest.mark.parametrize(("steps", "cell"), [(1, "0.5 s (the only step, with start-up)"), (3, "0.5 s |")])
def test_a_one_step_runs_mean_step_time_says_it_holds_start_up(tmp_path, capsys, steps, cell):
    # Was: "mean step time (the first, with start-up, left out)" over a figure that, with
    # one step, was that first step: start-up included, against its own label.
    run = make_run(tmp_path / "run", steps=steps)
    code, out, err = run_cli(["report", run], capsys)
    assert code == 0, err
    (line,) = [x for x in (run / "report" / "report.md").read_text().splitlines() if "mean step time" in x]
    assert cell in line
    assert ("the only step" in line) == (steps == 1)
