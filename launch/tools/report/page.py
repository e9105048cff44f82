"""The Markdown page of ``mpirl report``: the runs side by side, the figures, a few generations.

Tables have one column per run, so two runs (sync and async, two learning rates) compare
row by row. Everything that comes from a run (names, paths, prompts, responses) is escaped:
table cells and headings by backslash-escaping Markdown's punctuation and writing ``& < >``
as entities (no raw HTML gets through), generations in fenced blocks whose fence is longer
than any run of backticks inside them (so no text can close the block early).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from launch.tools.report.figures import mean_step_s, series
from launch.tools.report.runs import Run, number, section

PROMPT_CHARS = 1200  # the end of a prompt is shown: the question comes after any instructions
RESPONSE_CHARS = 2000
# What can start markup inside a line (a cell, a heading, a list item): `code`, *emphasis*,
# [links], ~~strike~~, table pipes; < > & become entities instead, so no HTML gets through.
MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_\[\]|~])")


# ----------------------------------------------------------------------------- escaping


def escape(text) -> str:
    """Inline text that renders as itself: on one line, in a table cell or a heading."""
    text = " ".join(str(text).split())  # a newline would end a table row
    text = MARKDOWN_PUNCTUATION.sub(r"\\\1", text)
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def fenced(text: str, info: str = "text") -> str:
    """A fenced block that shows ``text`` verbatim: backticks, pipes, HTML and all."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text.rstrip(chr(10))}\n{fence}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- figures


def fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 10:
        return f"{seconds:.3g} s"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def wall_clock(run: Run) -> str:
    if run.finished and number(run.summary, "wall_s") is not None:
        return duration(number(run.summary, "wall_s"))
    _, elapsed = series(run.metrics, "elapsed_s")
    return f"{duration(elapsed[-1])} so far" if elapsed else "—"


def eval_cell(record: dict | None) -> str:
    value = number(record, "pass@1")
    if value is None:
        return "—"
    step = number(record, "step")
    return fmt(value) + (f" (step {step:.0f})" if step is not None else "")


def results_rows(runs: list[Run]) -> list[list[str]]:
    def row(label, cell):
        return [label] + [cell(r) for r in runs]

    def reward(run, part):
        _, rewards = series(run.metrics, "reward_mean")
        return fmt(mean(rewards[:10] if part == "first" else rewards[-10:]))

    def mean_step_cell(run):
        cell = duration(mean_or_none(mean_step_s(run)))
        # One step: nothing to leave out, so the figure holds the start-up the label excludes.
        return cell + " (the only step, with start-up)" if len(series(run.metrics, "step_s")[1]) == 1 else cell

    def tokens_per_s(run):
        tokens, times = sum(series(run.metrics, "tokens")[1]), sum(series(run.metrics, "step_s")[1])
        return fmt(tokens / times) if times > 0 else "—"

    rows = [
        row("status", lambda r: escape(r.status)),
        row("steps logged", lambda r: f"{r.steps}" + (f" of {r.configured_steps}" if r.configured_steps else "")),
        row("wall-clock", wall_clock),
        row("tokens trained", lambda r: fmt(sum(series(r.metrics, "tokens")[1]))),
        row("mean step time (the first, with start-up, left out)", mean_step_cell),
        row("tokens / s of step time", tokens_per_s),
        row("train reward, first 10 steps", lambda r: reward(r, "first")),
        row("train reward, last 10 steps", lambda r: reward(r, "last")),
        row("eval pass@1, first", lambda r: eval_cell(r.evals[0] if r.evals else None)),
        row("eval pass@1, last", lambda r: eval_cell(r.evals[-1] if r.evals else None)),
    ]
    if any(number(r.summary, "heldout_acc_before") is not None for r in runs):
        rows.append(row("held-out accuracy, before → after", heldout))
    return rows


def heldout(run: Run) -> str:
    """The demo's held-out accuracy, measured outside the run, when its summary has it."""
    before, after = number(run.summary, "heldout_acc_before"), number(run.summary, "heldout_acc_after")
    return f"{fmt(before)} → {fmt(after)}"


def mean_or_none(value: float) -> float | None:
    return None if math.isnan(value) else value


# ----------------------------------------------------------------------------- settings


def world_cell(config: dict) -> str:
    """``controller 1, generator 2, ...``: a role is ``N`` or ``{ranks: N, ...}`` in a role map."""
    parts = []
    for role, value in section(config, "world").items():
        ranks = value.get("ranks") if isinstance(value, dict) else value
        if isinstance(ranks, int) and not isinstance(ranks, bool) and ranks > 0:
            parts.append(f"{role} {ranks}")
    return escape(", ".join(parts)) if parts else "—"


def setting(config: dict, *keys: str) -> str:
    values = []
    for key in keys:
        name, _, field = key.partition(".")
        value = section(config, name).get(field)
        values.append("—" if value is None else escape(value))
    return " / ".join(values)


SETTINGS = (
    ("model", ("model.path",)),
    ("task / reward", ("task.name", "reward.name")),
    ("steps / max staleness", ("run.steps", "run.max_staleness")),
    ("prompts per step / samples per prompt", ("rollout.prompts_per_step", "rollout.samples_per_prompt")),
    ("max new tokens / temperature", ("rollout.max_new_tokens", "rollout.temperature")),
    ("loss / lr / advantage", ("algorithm.loss", "algorithm.lr", "algorithm.advantage")),
    ("eval every / examples / samples", ("eval.every_steps", "eval.examples", "eval.samples")),
)


def settings_rows(runs: list[Run]) -> list[list[str]]:
    def cell(run, keys):
        return "—" if run.config is None else setting(run.config, *keys)

    rows = [["ranks"] + [world_cell(r.config) if r.config else "—" for r in runs]]
    return rows + [[label] + [cell(r, keys) for r in runs] for label, keys in SETTINGS]


# ----------------------------------------------------------------------------- samples


def chosen_samples(run: Run) -> list[dict]:
    """The first step's first two generations and the last step's first three: how the
    responses looked before and after training, without a wall of text."""
    steps = sorted({s["step"] for s in run.samples if isinstance(s.get("step"), int)})
    if not steps:
        return run.samples[:3]
    first, last = steps[0], steps[-1]
    at = lambda step, n: [s for s in run.samples if s.get("step") == step][:n]
    return at(last, 3) if first == last else at(first, 2) + at(last, 3)


def clipped_text(text, limit: int, keep_end: bool = False) -> str:
    text = "" if text is None else str(text)
    if len(text) <= limit:
        return text
    if keep_end:
        return f"[... {len(text) - limit} characters before]\n" + text[-limit:]
    return text[:limit] + f"\n[... {len(text) - limit} more characters]"


def sample_block(sample: dict) -> str:
    head = [f"step {escape(sample.get('step', '?'))}"]
    for key, label in (("policy_version", "policy version"), ("example_id", "example"), ("sample", "sample")):
        if sample.get(key) is not None:
            head.append(f"{label} {escape(sample[key])}")
    reward = number(sample, "reward")
    tail = f"reward {fmt(reward)}"
    components = sample.get("components")
    if isinstance(components, dict) and components:
        tail += " (" + ", ".join(f"{escape(k)} {fmt(number(components, k))}" for k in components) + ")"
    if sample.get("finish_reason") is not None:
        tail += f", finish: {escape(sample['finish_reason'])}"
    return "\n\n".join(
        [
            f"**{', '.join(head)}**: {tail}",
            "Prompt:",
            fenced(clipped_text(sample.get("prompt"), PROMPT_CHARS, keep_end=True)),
            "Response:",
            fenced(clipped_text(sample.get("response"), RESPONSE_CHARS)),
        ]
    )


# ----------------------------------------------------------------------------- the page


def render(runs: list[Run], figures: list[tuple[str, str | None, str]]) -> str:
    """The page. ``figures``: (heading, PNG file name relative to the page or None, why skipped)."""
    names = [escape(r.name) for r in runs]
    out = [
        f"# Run report: {', '.join(names)}",
        # check_out (launch/tools/report/__init__.py) knows an earlier report by these words: keep them.
        "Written by `mpirl report` from "
        + ", ".join(f"{escape(r.path)} ({n})" for r, n in zip(runs, names))
        + ". Is it learning, and where does the time go?",
        "## Results",
        table([""] + names, results_rows(runs)),
        "## Settings (config.yaml)",
        table([""] + names, settings_rows(runs)),
        "## What was read",
        "\n".join(
            f"- {n}: " + ("; ".join(escape(x) for x in r.notes) or "every line read") for r, n in zip(runs, names)
        ),
        "## Figures",
    ]
    for heading, png, why_skipped in figures:
        out.append(f"### {heading}")
        out.append(f"![{heading}]({png})" if png else f"Skipped: {why_skipped}.")
    shown = [(n, chosen_samples(r)) for r, n in zip(runs, names)]
    if any(samples for _, samples in shown):
        out.append("## Sample generations")
        for name, samples in shown:
            out.append(f"### {name}")
            out.extend(sample_block(s) for s in samples)
            if not samples:
                out.append("No samples.jsonl.")
    return "\n\n".join(out) + "\n"


def write_page(runs: list[Run], figures: list[tuple[str, Path | None, str]], out: Path) -> Path:
    page = out / "report.md"
    rel = [(h, png.relative_to(out).as_posix() if png else None, why) for h, png, why in figures]
    page.write_text(render(runs, rel))
    return page
