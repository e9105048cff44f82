"""The figures of ``mpirl report``: one function per PNG, several runs on the same axes.

Each function takes the runs and the folder to write into, and returns the PNG's path, or
None when no run has the data (no eval, no trainer statistics...): the page then says the
figure was skipped. A run keeps its colour in every figure (``C0``, ``C1``, ... in the order
given), and a legend below each figure names the runs; line styles (mean solid, max dotted)
are explained in each panel's own legend. Figures are drawn on a ``matplotlib.figure.Figure``
of their own, not through pyplot: no display is needed on a cluster node, nothing global stays open.
"""

from __future__ import annotations

from pathlib import Path

from launch.tools.report.runs import Run, number

WIDTH_IN, DPI = 12.0, 100  # 1200 px wide: readable at ~1000 px
RAW_ALPHA = 0.25  # the unsmoothed series, drawn faint under its moving average

# Where the trainer's step goes (see ``time_png``), in stacking order.
TIME_PARTS = (
    ("training", "trainer.train_s", "#55A868"),
    ("weight send", "trainer.weight_send_s", "#C44E52"),
    ("checkpoint save", "checkpoint_save_s", "#8172B3"),
    ("waiting for data", "trainer.trainer_wait_s", "#CCCCCC"),
)
OTHER_COLOUR = "#937860"
ROLE_COLOURS = {"generator": "#4C72B0", "reward": "#DD8452", "trainer": "#55A868", "colocated": "#8172B3"}


# ----------------------------------------------------------------------------- series


def series(records: list[dict], key: str, x: str = "step") -> tuple[list[float], list[float]]:
    """(x, y) of the records where both are numbers: a null (a step with no samples) is a gap
    in the data, not a zero."""
    xs, ys = [], []
    for r in records:
        xv, yv = number(r, x), number(r, key)
        if xv is not None and yv is not None:
            xs.append(xv)
            ys.append(yv)
    return xs, ys


def smoothing_window(n: int) -> int:
    """A short window: about a twentieth of the run, 3 to 25 points."""
    return max(1, min(n, 25, max(3, n // 20)))


def moving_average(ys: list[float], window: int) -> list[float]:
    """Trailing mean over ``window`` points (fewer at the start), so the curve starts at step 0
    and a late change shows where it happened rather than half a window early."""
    out, total = [], 0.0
    for i, y in enumerate(ys):
        total += y
        if i >= window:
            total -= ys[i - window]
        out.append(total / min(i + 1, window))
    return out


def has(runs: list[Run], key: str, source: str = "metrics") -> bool:
    return any(series(getattr(r, source), key)[0] for r in runs)


def time_unit(max_s: float) -> tuple[float, str]:
    """Seconds for a short run, minutes or hours for a long one: readable tick labels."""
    if max_s >= 3 * 3600:
        return 3600.0, "hours"
    if max_s >= 600:
        return 60.0, "minutes"
    return 1.0, "seconds"


# ----------------------------------------------------------------------------- drawing


def new_figure(rows: int, cols: int, title: str, row_height: float = 3.8):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH_IN, row_height * rows + 1.2), dpi=DPI, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    fig.suptitle(title, fontsize=13)
    return fig, axes


def colour(i: int) -> str:
    return f"C{i % 10}"


def run_legend(fig, runs: list[Run]) -> None:
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colour(i), lw=2.5, label=r.name) for i, r in enumerate(runs)]
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(runs), 5), frameon=False, fontsize=11)


def style_legend(ax, styles: list[tuple[str, dict]]) -> None:
    """What the line styles of a panel mean (colours are the runs, in the figure's legend)."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color="0.3", label=label, **style) for label, style in styles]
    ax.legend(handles=handles, fontsize=8, loc="best")


def plot_smoothed(ax, xs: list[float], ys: list[float], c: str, lw: float = 1.8, **style) -> None:
    ax.plot(xs, ys, color=c, alpha=RAW_ALPHA, lw=0.8, **style)
    ax.plot(xs, moving_average(ys, smoothing_window(len(ys))), color=c, lw=lw, **style)


def smoothed_curve(key: str, **style):
    """A panel's plotter: ``key``'s moving average over its raw values, in the run's colour."""

    def draw(ax, run: Run, c: str) -> None:
        xs, ys = series(run.metrics, key)
        if xs:
            plot_smoothed(ax, xs, ys, c, **style)

    return draw


def raw_curve(key: str, **style):
    """A panel's plotter: ``key``'s raw values, in the run's colour."""

    def draw(ax, run: Run, c: str) -> None:
        ax.plot(*series(run.metrics, key), color=c, **style)

    return draw


def overlay(*plotters):
    """A panel's plotter that draws each of ``plotters`` in turn."""

    def draw(ax, run: Run, c: str) -> None:
        for plot in plotters:
            plot(ax, run, c)

    return draw


def save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=DPI)
    return path


SHARES = ("clip ratio", "clip fraction")  # y labels of panels whose values are shares in [0, 1]
MEAN_MAX = [("mean", {"lw": 1.8}), ("max", {"lw": 1, "ls": ":"})]
SMOOTHED = [("moving average", {"lw": 1.8}), ("raw", {"lw": 0.8, "alpha": 0.4})]


def per_run_figure(runs: list[Run], path: Path, title: str, panels: list[tuple]) -> Path:
    """One row of panels, x = step. A panel: (title, y label, draw(ax, run, colour), line styles
    to explain in its legend)."""
    fig, axes = new_figure(1, len(panels), title)
    for ax, (panel_title, ylabel, draw, styles) in zip(axes[0], panels):
        for i, run in enumerate(runs):
            draw(ax, run, colour(i))
        ax.set_title(panel_title)
        ax.set_xlabel("trainer step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if ylabel in SHARES:  # a share of 0 throughout should sit on the floor, not mid-panel
            ax.set_ylim(0, max(ax.get_ylim()[1], 0.05))
        style_legend(ax, styles)
    run_legend(fig, runs)
    return save(fig, path)


# ----------------------------------------------------------------------------- figures


def reward_png(runs: list[Run], path: Path) -> Path | None:
    """Training reward (moving average over the faint raw) and eval pass@1 (markers), against
    the step and against wall-clock time: a faster run reaches the same reward further left."""
    if not (has(runs, "reward_mean") or has(runs, "pass@1", "evals")):
        return None
    longest = max((number(r, "elapsed_s") or 0.0 for run in runs for r in run.metrics + run.evals), default=0.0)
    divisor, unit = time_unit(longest)
    fig, axes = new_figure(1, 2, "Training reward and eval pass@1")
    for ax, x, xlabel in ((axes[0][0], "step", "trainer step"), (axes[0][1], "elapsed_s", f"wall-clock ({unit})")):
        scale = 1.0 if x == "step" else divisor
        for i, run in enumerate(runs):
            xs, ys = series(run.metrics, "reward_mean", x)
            if xs:
                plot_smoothed(ax, [v / scale for v in xs], ys, colour(i))
            xs, ys = series(run.evals, "pass@1", x)
            if xs:
                ax.plot([v / scale for v in xs], ys, color=colour(i), marker="o", ms=6, ls="--", lw=1)
        ax.set_title(f"against {'the step' if x == 'step' else 'wall-clock time'}")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("reward / pass@1")
        ax.grid(alpha=0.3)
        styles = [("train reward (moving avg.)", {"lw": 1.8}), ("train reward (raw)", {"lw": 0.8, "alpha": 0.4})]
        if has(runs, "pass@1", "evals"):  # the marker's entry only where there are markers
            styles.append(("eval pass@1", {"marker": "o", "ls": "--", "lw": 1}))
        style_legend(ax, styles)
    run_legend(fig, runs)
    return save(fig, path)


def length_png(runs: list[Run], path: Path) -> Path | None:
    """Response length (mean solid, max faint dotted) and the share cut at max_new_tokens."""
    if not (has(runs, "response_length_mean") or has(runs, "response_clip_ratio")):
        return None

    lengths = overlay(
        raw_curve("response_length_max", alpha=0.4, lw=0.8, ls=":"), smoothed_curve("response_length_mean")
    )
    out = per_run_figure(
        runs,
        path,
        "Response length and clipping",
        [
            (
                "response length (tokens)",
                "tokens",
                lengths,
                [
                    ("mean, moving average", {"lw": 1.8}),
                    ("mean, raw", {"lw": 0.8, "alpha": 0.4}),
                    ("max", {"lw": 0.8, "ls": ":"}),
                ],
            ),
            (
                "share of responses cut at max_new_tokens",
                "clip ratio",
                smoothed_curve("response_clip_ratio"),
                SMOOTHED,
            ),
        ],
    )
    return out


def time_png(runs: list[Run], path: Path) -> Path | None:
    """Where each step's time goes: one row per run.

    Left, the trainer's view of a step, stacked: training, weight send, checkpoint save,
    waiting for data (``trainer.trainer_wait_s``), and the rest of ``step_s`` ("other": the
    controller's and the messages' overhead). These are sequential on the trainer, so they add
    up to about ``step_s``: the critical path of a step as the trainer lives it. Each part is a
    moving average (per-step times are too noisy to read stacked); the faint line is the raw
    ``step_s``. The stage times ``generation_s`` and ``reward_s`` are not stacked: in
    asynchronous mode they overlap training, and their sum can exceed the step. How much each
    role works is the right panel instead: its busy fraction (``busy``: the share of its
    rank-time spent on the step's data, smoothed), so idle generators or trainers show as low
    curves, and a busy fraction near 1 names the bottleneck.
    """
    timed = [r for r in runs if series(r.metrics, "step_s")[0]]
    if not timed:
        return None
    fig, axes = new_figure(len(timed), 2, "Where the time goes", row_height=3.4)
    shown: dict[str, str] = {}
    for row, run in enumerate(timed):
        ax, busy_ax = axes[row]
        shown |= stack_step_times(ax, run)
        ax.set_xlabel("trainer step")
        ax.set_ylabel("seconds")
        busy_fractions(busy_ax, run)
    from matplotlib.patches import Patch

    handles = [Patch(color=c, label=label) for label, c in shown.items()]
    fig.legend(
        handles=handles, loc="outside lower center", ncol=len(handles), frameon=False, title="the trainer's step"
    )
    return save(fig, path)


def step_parts(run: Run) -> tuple[list[float], list[float], dict[str, list[float]]]:
    """Per step: the step, ``step_s``, and its sequential parts on the trainer, with what is
    left of it ("other")."""
    steps, totals, parts = [], [], {label: [] for label, _, _ in TIME_PARTS} | {"other": []}
    for r in run.metrics:
        step, step_s = number(r, "step"), number(r, "step_s")
        if step is None or step_s is None:
            continue
        steps.append(step)
        totals.append(step_s)
        accounted = 0.0
        for label, key, _ in TIME_PARTS:
            value = number(r, key)
            if value is None and key == "trainer.train_s":
                value = number(r, "training_s")  # the top-level copy, if the trainer's is missing
            value = max(value or 0.0, 0.0)
            parts[label].append(value)
            accounted += value
        parts["other"].append(max(step_s - accounted, 0.0))
    return steps, totals, parts


def smoothed_after_first(ys: list[float]) -> list[float]:
    """A moving average that leaves the first step alone: it carries start-up (model load, the
    first compile), which would otherwise smear over the next steps."""
    return ys[:1] + moving_average(ys[1:], smoothing_window(len(ys) - 1)) if len(ys) > 1 else ys


def stack_step_times(ax, run: Run) -> dict[str, str]:
    """Draw the run's stacked step parts; return the parts drawn, with their colours."""
    steps, totals, parts = step_parts(run)
    shown = {label: c for label, _, c in TIME_PARTS if any(parts[label])} | {"other": OTHER_COLOUR}
    ax.stackplot(
        steps,
        [smoothed_after_first(parts[label]) for label in shown],
        colors=list(shown.values()),
        step="mid",  # one flat block per step, like bars, however many steps
    )
    ax.plot(steps, totals, color="0.2", lw=0.6, alpha=0.4)
    title = f"{run.name}: the trainer's step ({mean_step_s(run):.3g} s mean)"
    # A scale that fits the start-up step would flatten every other: it is cut off instead,
    # and its height written in the title.
    ordered = sorted(totals)
    if len(ordered) >= 10:
        typical = ordered[int(0.98 * (len(ordered) - 1))]
        if ordered[-1] > 2.5 * typical > 0:
            ax.set_ylim(0, typical * 1.25)
            title += f"; off scale: up to {ordered[-1]:.3g} s"
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return shown


def busy_fractions(ax, run: Run) -> None:
    """Each role's busy fraction, smoothed; raw per-step values spike where a step was short."""
    roles = sorted({k for r in run.metrics if isinstance(r.get("busy"), dict) for k in r["busy"]})
    top = 1.1
    for role in roles:
        xs, ys = series(run.metrics, f"busy.{role}")
        if xs:
            smooth = smoothed_after_first(ys)
            ax.plot(xs, smooth, color=ROLE_COLOURS.get(role, OTHER_COLOUR), lw=1.8, label=role)
            top = max(top, 1.1 * max(smooth[1:] or smooth))
    ax.set_ylim(0, top)
    ax.set_title(f"{run.name}: busy fraction per role (moving average)")
    ax.set_xlabel("trainer step")
    ax.set_ylabel("share of rank-time working")
    ax.grid(alpha=0.3)
    if roles:
        ax.legend(fontsize=8, loc="lower right")


def mean_step_s(run: Run) -> float:
    """Mean step time without the first step when there are others (it carries start-up)."""
    _, times = series(run.metrics, "step_s")
    times = times[1:] if len(times) > 1 else times
    return sum(times) / len(times) if times else float("nan")


def ratios_png(runs: list[Run], path: Path) -> Path | None:
    """Off-policy health: how stale the trained samples were, and the importance ratios of the
    AIPO loss (pi/mu: mean and max, and the share of tokens clipped at rho)."""
    keys = ("staleness_mean", "staleness_max", "trainer.ratio_mean", "trainer.ratio_max", "trainer.clip_frac")
    if not any(has(runs, k) for k in keys):
        return None

    staleness = overlay(raw_curve("staleness_mean", lw=1.8), raw_curve("staleness_max", lw=1, ls=":"))
    ratios = overlay(smoothed_curve("trainer.ratio_mean"), smoothed_curve("trainer.ratio_max", ls=":", lw=1.2))
    out = per_run_figure(
        runs,
        path,
        "Staleness and importance ratios",
        [
            ("staleness of the trained samples", "policy versions behind", staleness, MEAN_MAX),
            (
                "importance ratio pi / mu (moving average over raw)",
                "ratio",
                ratios,
                [("mean", {"lw": 1.8}), ("max", {"lw": 1.2, "ls": ":"})],
            ),
            ("share of tokens clipped at rho", "clip fraction", smoothed_curve("trainer.clip_frac"), SMOOTHED),
        ],
    )
    return out


def loss_png(runs: list[Run], path: Path) -> Path | None:
    """The training loss and the trainer's gradient norm (moving average over the raw)."""
    if not (has(runs, "loss") or has(runs, "trainer.grad_norm")):
        return None

    return per_run_figure(
        runs,
        path,
        "Loss and gradient norm",
        [
            ("loss", "loss", smoothed_curve("loss"), SMOOTHED),
            ("gradient norm", "grad norm", smoothed_curve("trainer.grad_norm"), SMOOTHED),
        ],
    )


# Every figure, in page order: file name, heading, the function, what it needs when absent.
FIGURES = (
    ("reward.png", "Reward and eval pass@1", reward_png, "no run logged a training reward or an eval"),
    ("length.png", "Response length", length_png, "no run logged response lengths"),
    ("time.png", "Where the time goes", time_png, "no run logged step times"),
    ("ratios.png", "Staleness and importance ratios", ratios_png, "no run logged staleness or ratios"),
    ("loss.png", "Loss and gradient norm", loss_png, "no run logged a loss or a gradient norm"),
)
