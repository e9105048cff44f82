"""mpirl report: figures and a Markdown page from run folders, finished, partial or resumed.

The run folders are synthetic (what the controller writes, with made-up numbers), so the tests
do not depend on any run having been made on this machine.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import yaml

from launch import cli
from launch.tools.report import ReportError, load_runs, write_report
from launch.tools.report.figures import moving_average, smoothing_window
from launch.tools.report.page import escape, fenced

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FIGURES = ("reward.png", "length.png", "time.png", "ratios.png", "loss.png")

CONFIG = {
    "world": {"controller": 1, "generator": {"ranks": 2, "engine": "torch"}, "reward": 1, "trainer": 1},
    "model": {"path": "runs/arith/sft", "dtype": "float32"},
    "task": {"name": "arith"},
    "reward": {"name": "arith_exact"},
    "rollout": {"prompts_per_step": 16, "samples_per_prompt": 8, "max_new_tokens": 4, "temperature": 1.0},
    "algorithm": {"loss": "aipo", "rho": 4.0, "lr": 3.0e-05, "advantage": "group_std"},
    "eval": {"every_steps": 10, "examples": 200, "samples": 4},
    "run": {"steps": 30, "max_staleness": 1, "out": "runs/x"},
}


def metrics_line(step: int, elapsed_s: float, step_s: float, rng: random.Random) -> dict:
    """One trainer step as the controller logs it, with the trainer's parts adding up to step_s."""
    reward = min(1.0, 0.3 + 0.01 * step + rng.uniform(-0.05, 0.05))
    train_s = 0.6 * step_s
    send_s = 0.05 * step_s
    wait_s = step_s - train_s - send_s - 0.01 * step_s
    staleness = 0.0 if step == 0 else 1.0
    return {
        "step": step,
        "policy_version": step + 1,
        "reward_mean": reward,
        "correct_mean": reward,
        "reward_components": {"arith_exact": reward, "correct": reward},
        "response_length_mean": 3.0 + rng.uniform(-0.3, 0.3),
        "response_length_max": 4,
        "response_clip_ratio": rng.choice([0.0, 0.0078125]),
        "zero_advantage_group_share": 0.5,
        "loss": -0.2 + rng.uniform(-0.05, 0.05),
        "tokens": 360 + rng.randrange(20),
        "generation_s": 0.8 * step_s,
        "reward_s": 0.1 * step_s,
        "training_s": train_s,
        "weight_sync_s": send_s,
        "generator_wait_s": 0.0,
        "staleness_max": staleness,
        "staleness_mean": staleness,
        "verifier_failures": 0,
        "verifier_timeouts": 0,
        "prompts_too_long": 0,
        "step_s": step_s,
        "busy": {"generator": 0.7 + rng.uniform(-0.1, 0.1), "reward": 0.1, "trainer": 0.65},
        "elapsed_s": elapsed_s,
        "checkpoint_save_s": None,
        "trainer": {
            "loss": -0.2,
            "grad_norm": 8.0 + rng.uniform(-1, 1),
            "ratio_mean": 1.0 + rng.uniform(0, 0.01),
            "ratio_max": 1.0 + rng.uniform(0, 0.5),
            "clip_frac": rng.choice([0.0, 0.01]),
            "train_s": train_s,
            "trainer_wait_s": wait_s,
            "weight_send_s": send_s,
            "staleness_max": staleness,
            "staleness_mean": staleness,
        },
    }


def metrics_lines(steps: range, step_s: float, elapsed_before: float = 0.0, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    lines, elapsed = [], elapsed_before
    for step in steps:
        this_step = 4.0 if step == 0 else step_s * rng.uniform(0.8, 1.2)  # start-up in the first
        elapsed += this_step
        lines.append(metrics_line(step, elapsed, this_step, rng))
    return lines


def eval_line(round_: int, step: int, elapsed_s: float, pass1: float) -> dict:
    return {
        "eval_round": round_,
        "step": step,
        "policy_version": step,
        "examples": 200,
        "pass@1": pass1,
        "reward_mean": pass1,
        "response_length_mean": 3.0,
        "response_clip_ratio": 0.0,
        "mean@4": pass1 - 0.02,
        "pass@4": pass1 + 0.1,
        "elapsed_s": elapsed_s,
    }


def sample_line(step: int, example_id: int, sample: int, prompt: str = "12+7=", response: str = "19") -> dict:
    return {
        "step": step,
        "policy_version": step,
        "example_id": example_id,
        "group_id": 100 * step + example_id,
        "sample": sample,
        "prompt": prompt,
        "response": response,
        "reward": 1.0,
        "components": {"correct": 1.0},
        "finish_reason": "stop",
    }


def write_jsonl(path: Path, records: list[dict], cut_last: bool = False) -> None:
    text = "".join(json.dumps(r) + "\n" for r in records)
    if cut_last:  # a run still writing: the last line is half there, without its newline
        text = text[: -len(json.dumps(records[-1])) // 2 - 1]
    path.write_text(text)


def make_run(
    path: Path,
    steps: int = 30,
    step_s: float = 0.2,
    finished: bool = True,
    evals: bool = True,
    samples: list[dict] | None = None,
    cut_last: bool = False,
) -> Path:
    path.mkdir(parents=True)
    metrics = metrics_lines(range(steps), step_s)
    write_jsonl(path / "metrics.jsonl", metrics, cut_last=cut_last)
    (path / "config.yaml").write_text(yaml.safe_dump({**CONFIG, "run": {**CONFIG["run"], "steps": steps}}))
    if evals:
        rounds = [(0, 0.28)] + [(s, 0.28 + 0.004 * s) for s in range(10, steps + 1, 10)]
        elapsed = {0: 1.0} | {s: metrics[s - 1]["elapsed_s"] + 0.5 for s, _ in rounds[1:]}
        write_jsonl(path / "eval.jsonl", [eval_line(i, s, elapsed[s], p) for i, (s, p) in enumerate(rounds)])
    if samples is None:
        samples = [sample_line(s, e, k) for s in (0, steps - 1) for e in (3, 5) for k in (0, 1)]
    write_jsonl(path / "samples.jsonl", samples)
    if finished:
        rewards = [m["reward_mean"] for m in metrics]
        summary = {
            "steps": steps,
            "wall_s": metrics[-1]["elapsed_s"] + 1.0,
            "train_reward_first10": sum(rewards[:10]) / 10,
            "train_reward_last10": sum(rewards[-10:]) / 10,
        }
        (path / "summary.json").write_text(json.dumps(summary))
    return path


# ----------------------------------------------------------------------------- checks


def assert_real_png(path: Path) -> None:
    """A PNG that decodes, of a useful size, and not blank (the pixels vary)."""
    import matplotlib.image

    assert path.read_bytes()[:8] == PNG_SIGNATURE, path
    assert path.stat().st_size > 20_000, path
    pixels = matplotlib.image.imread(path)
    assert pixels.shape[1] >= 1000, f"{path}: {pixels.shape[1]} px wide"
    assert pixels[..., :3].std() > 0.05, f"{path} looks blank"


def image_links(page: Path) -> list[str]:
    return re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page.read_text())


def assert_links_resolve(page: Path) -> None:
    """Every PNG written is linked, and every link names a file beside the page."""
    links = image_links(page)
    assert sorted(links) == sorted(p.name for p in page.parent.glob("*.png"))
    for link in links:
        assert not Path(link).is_absolute()
        assert (page.parent / link).is_file(), link


def outside_fences(markdown: str) -> list[str]:
    """The lines of a page that are not inside a fenced code block (CommonMark: a block opened
    by N backticks is closed only by a line of at least N backticks)."""
    lines, fence = [], None
    for line in markdown.splitlines():
        opening = re.match(r"^(`{3,})", line)
        if fence is None and opening:
            fence = opening.group(1)
        elif fence is not None and re.fullmatch("`{" + str(len(fence)) + r",}\s*", line):
            fence = None
        elif fence is None:
            lines.append(line)
    assert fence is None, "a fenced block is never closed"
    return lines


def table_rows(markdown: str) -> list[list[str]]:
    """The tables of a page, row by row, split at the unescaped pipes."""
    return [re.split(r"(?<!\\)\|", line)[1:-1] for line in outside_fences(markdown) if line.startswith("|")]


# ----------------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def finished_report(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("finished")
    return write_report([make_run(root / "async")], root / "report")


def test_a_finished_run_gets_every_figure_and_a_page_linking_them(finished_report):
    for name in FIGURES:
        assert_real_png(finished_report.parent / name)
    assert_links_resolve(finished_report)
    text = finished_report.read_text()
    assert text.startswith("# Run report: async")
    assert "| status | finished |" in text
    assert "| steps logged | 30 of 30 |" in text
    assert "| eval pass@1, first | 0.28 (step 0) |" in text
    assert "| eval pass@1, last | 0.4 (step 30) |" in text
    assert "controller 1, generator 2, reward 1, trainer 1" in text
    assert "aipo / 3e-05 / group\\_std" in text
    assert "async: every line read" in text
    assert "Skipped" not in text


def test_the_page_shows_the_first_and_the_last_steps_generations(finished_report):
    blocks = re.findall(r"^\*\*step (\d+),", finished_report.read_text(), flags=re.M)
    assert blocks == ["0", "0", "29", "29", "29"]


def test_two_runs_of_the_same_name_are_told_apart_and_share_the_figures(tmp_path):
    sync = make_run(tmp_path / "sync" / "run", step_s=0.4)
    fast = make_run(tmp_path / "async" / "run", step_s=0.2)
    runs = load_runs([sync, fast])
    assert [r.name for r in runs] == ["sync/run", "async/run"]
    page = write_report([sync, fast], tmp_path / "report")
    for name in FIGURES:
        assert_real_png(page.parent / name)
    assert_links_resolve(page)
    header = table_rows(page.read_text())[0]
    assert [h.strip() for h in header] == ["", "sync/run", "async/run"]
    # The faster run's wall-clock is about half the other's: both are on the page.
    wall = [r for r in table_rows(page.read_text()) if r[0].strip() == "wall-clock"][0]
    slow_s, fast_s = (float(c.split()[0]) for c in wall[1:])
    assert fast_s < 0.7 * slow_s


def test_a_partial_run_is_reported_with_what_it_has(tmp_path):
    run = make_run(tmp_path / "going", finished=False, evals=False, cut_last=True)
    (loaded,) = load_runs([run])
    assert loaded.steps == 29  # the cut 30th line is skipped, not an error
    assert not loaded.finished and loaded.status.startswith("partial")
    assert any("last line (line 30) is cut short" in n for n in loaded.notes)
    page = write_report([run], tmp_path / "report")
    for name in FIGURES:  # eval is missing, but the train reward still makes the first figure
        assert_real_png(page.parent / name)
    assert_links_resolve(page)
    text = page.read_text()
    assert "| status | partial: no summary.json" in text
    assert "| eval pass@1, last | — |" in text
    assert "so far" in text  # the wall-clock is the last step's, not a total
    assert "the last line (line 30) is cut short" in text


def test_undecodable_lines_are_counted_and_skipped(tmp_path):
    run = make_run(tmp_path / "damaged")
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[5] = "{not json"
    lines[7] = "[1, 2]"  # JSON, but not a record
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (loaded,) = load_runs([run])
    assert loaded.steps == 28
    assert "metrics.jsonl: 2 undecodable lines skipped (line 6, 8)" in loaded.notes


def test_a_resumed_run_reads_as_one_run(tmp_path):
    run = make_run(tmp_path / "resumed", steps=30)
    # Steps 0-14 from the first launch, then 15-29 from the resume, elapsed_s continuing.
    first = metrics_lines(range(15), 0.2, seed=1)
    second = metrics_lines(range(15, 30), 0.3, elapsed_before=first[-1]["elapsed_s"] + 0.5, seed=2)
    write_jsonl(run / "metrics.jsonl", first + second)
    (loaded,) = load_runs([run])
    assert [r["step"] for r in loaded.metrics] == list(range(30))
    elapsed = [r["elapsed_s"] for r in loaded.metrics]
    assert elapsed == sorted(elapsed)
    assert loaded.finished and not loaded.notes
    page = write_report([run], tmp_path / "report")
    assert_real_png(page.parent / "reward.png")
    assert_links_resolve(page)


def test_a_step_logged_twice_keeps_the_later_line(tmp_path):
    run = make_run(tmp_path / "twice", steps=20)
    lines = metrics_lines(range(20), 0.2)
    again = {**lines[12], "reward_mean": 0.99}
    write_jsonl(run / "metrics.jsonl", lines + [again])
    (loaded,) = load_runs([run])
    assert loaded.steps == 20 and loaded.metrics[12]["reward_mean"] == 0.99
    assert "metrics.jsonl: 1 step logged twice: the later line kept" in loaded.notes


def test_a_resumed_run_still_going_is_not_called_finished(tmp_path):
    run = make_run(tmp_path / "again", steps=30)
    (run / "summary.json").write_text(json.dumps({"steps": 20, "wall_s": 5.0}))  # from the stop at 20
    (loaded,) = load_runs([run])
    assert loaded.status.startswith("resumed and still going")


def test_generations_with_markdown_and_html_render_as_text(tmp_path):
    nasty_prompt = "a | b | c\n```\n<script>alert(1)</script>\n````"
    nasty_response = "x` `` ```` | </details> **bold** <img src=x onerror=alert(1)>"
    samples = [sample_line(0, 1, 0, nasty_prompt, nasty_response)]
    samples[0]["finish_reason"] = "<b>stop</b> | length"
    run = make_run(tmp_path / "nasty", samples=samples)
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["model"]["path"] = "models/a|b<script>`x`"
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    text = write_report([run], tmp_path / "report").read_text()
    assert nasty_prompt in text and nasty_response in text  # verbatim, inside the fences
    prose = "\n".join(outside_fences(text))
    assert "<script" not in prose and "<img" not in prose and "<b>" not in prose
    rows = table_rows(text)
    assert all(len(row) == len(rows[0]) for row in rows), "a pipe broke a table row"
    model = [r for r in rows if r[0].strip() == "model"][0]
    assert model[1].strip() == "models/a\\|b&lt;script&gt;\\`x\\`"


def test_escape_and_fences():
    assert escape("a|b\nc") == "a\\|b c"
    assert escape("<i>") == "&lt;i&gt;"
    assert fenced("x ```` y").startswith("`````text\n")
    assert fenced("plain").startswith("```text\n")


def test_the_moving_average_trails_and_starts_at_the_first_point():
    assert moving_average([3.0, 0.0, 0.0, 3.0], 2) == [3.0, 1.5, 0.0, 1.5]
    assert smoothing_window(30) == 3 and smoothing_window(300) == 15 and smoothing_window(10_000) == 25
    assert smoothing_window(2) == 2


def test_figures_without_data_are_skipped_and_said_so(tmp_path):
    run = make_run(tmp_path / "plain", evals=False)
    lines = metrics_lines(range(30), 0.2)
    for r in lines:  # an older run: no staleness, no trainer statistics
        for key in ("staleness_max", "staleness_mean", "trainer"):
            del r[key]
    write_jsonl(run / "metrics.jsonl", lines)
    page = write_report([run], tmp_path / "report")
    assert not (page.parent / "ratios.png").exists()
    assert "### Staleness and importance ratios\n\nSkipped: no run logged staleness or ratios." in page.read_text()
    assert_real_png(page.parent / "time.png")  # step_s minus the (absent) parts is "other"
    assert_links_resolve(page)


def test_a_colocated_run_and_a_broken_config(tmp_path):
    run = make_run(tmp_path / "colocated")
    lines = metrics_lines(range(30), 0.2)
    for r in lines:
        r["busy"] = {"colocated": 0.9, "reward": 0.1}
    write_jsonl(run / "metrics.jsonl", lines)
    (run / "config.yaml").write_text("world: [unclosed\n")
    (run / "samples.jsonl").unlink()
    (loaded,) = load_runs([run])
    assert loaded.config is None and any("config.yaml" in n for n in loaded.notes)
    page = write_report([run], tmp_path / "report")
    assert_real_png(page.parent / "time.png")
    text = page.read_text()
    assert "| ranks | — |" in text and "Sample generations" not in text


def test_a_folder_that_is_not_a_run_is_a_clear_error(tmp_path):
    empty = tmp_path / "not-a-run"
    empty.mkdir()
    with pytest.raises(ReportError, match=r"not-a-run: not a run folder \(no metrics.jsonl"):
        write_report([empty], tmp_path / "report")
    with pytest.raises(ReportError, match="missing: no such folder"):
        load_runs([tmp_path / "missing"])


def run_cli(argv, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    out, err = capsys.readouterr()
    return info.value.code, out, err


def test_cli_report_exits_2_with_one_line_on_a_bad_folder(tmp_path, capsys):
    empty = tmp_path / "nothing-here"
    empty.mkdir()
    code, out, err = run_cli(["report", str(empty)], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("mpirl: report: ") and "nothing-here" in err
    assert "Traceback" not in err
    assert not (empty / "report").exists()


def test_cli_report_writes_beside_one_run_by_default(tmp_path, capsys):
    run = make_run(tmp_path / "one", steps=12, evals=False)
    code, out, _ = run_cli(["report", str(run)], capsys)
    assert code == 0 and out.strip() == str(run / "report" / "report.md")
    assert_links_resolve(run / "report" / "report.md")


def test_a_run_with_episodes_gets_their_figure(tmp_path):
    run = make_run(tmp_path / "tools")
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    for i, line in enumerate(lines):
        line["episodes"] = {"episode_turns_mean": 1.5 + i / 60, "tool_call_rate": i / 30, "tool_error_rate": 0.1}
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    page = write_report([run], tmp_path / "report")
    assert_real_png(page.parent / "episodes.png")
    assert "Episodes and tool calls" in page.read_text() and "Skipped" not in page.read_text()
