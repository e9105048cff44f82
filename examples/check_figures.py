"""Checks the CPU demos' learning figures against the ones recorded for them.

Each demo records what it learns in ``examples/<demo>/expected.json``: the run's
``summary.json`` to read and, per figure, the value measured at seed 0 and an absolute
tolerance. A figure is a key of the summary, a dotted path into it (``eval_last.pass@1``) or
the difference of two of those (``heldout_acc_after - heldout_acc_before``, the lift).

    python examples/check_figures.py                 # both demos, after `make demo demo-gsm8k`
    python examples/check_figures.py examples/gsm8k/expected.json --summary runs/x/summary.json

Prints one line per figure and exits 1 naming every figure out of tolerance (2 when a summary
is missing), so a change that moves what the demos learn cannot pass unnoticed: a deliberate
one updates the expected file (``--record`` writes the summary's values into it, tolerances
kept) and the README's table in the same commit.

At seed 0 a demo repeats its figures exactly on one machine; another machine whose torch
picks other CPU kernels trains on other floats and lands elsewhere (docs/log.md, "The demos'
learning figures"). The expected file names the torch build and CPU kernels it was recorded
with, and a failure on a machine with others says so.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT = [REPO / "examples" / "arith" / "expected.json", REPO / "examples" / "gsm8k" / "expected.json"]


def figure(summary: dict, name: str) -> float:
    """The value of figure ``name`` in ``summary`` (see the module docstring); KeyError if absent."""
    if " - " in name:
        left, right = name.split(" - ", 1)
        return figure(summary, left) - figure(summary, right)
    value = summary
    for part in name.strip().split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(f"{name}: no {part!r} in the summary")
        value = value[part]
    return float(value)


def environment() -> dict:
    """The torch build and the CPU kernels it uses here: what the figures depend on beyond the code."""
    try:
        import torch
    except ImportError:
        return {}
    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def check(expected: dict, summary: dict) -> tuple[list[str], list[str]]:
    """Compare ``summary`` with ``expected["figures"]``: (report lines, failures), one per figure."""
    lines, failures = [], []
    for name, want in expected["figures"].items():
        value, tolerance = float(want["value"]), float(want["tolerance"])
        try:
            got = figure(summary, name)
        except KeyError as e:
            failures.append(f"{name}: missing ({e.args[0]})")
            lines.append(f"  MISSING {name}")
            continue
        ok = abs(got - value) <= tolerance + 1e-9
        line = f"{name} = {got:.4f}, expected {value:.4f} +- {tolerance:.4f}"
        lines.append(f"  {'ok     ' if ok else 'OUT    '} {line}")
        if not ok:
            failures.append(f"{line} (off by {got - value:+.4f})")
    return lines, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("expected", nargs="*", type=Path, help="expected.json files (default: both demos')")
    parser.add_argument("--summary", type=Path, help="summary.json to check (default: the one the expected file names)")
    parser.add_argument("--record", action="store_true", help="write the summary's figures into the expected file")
    args = parser.parse_args(argv)
    files = args.expected or DEFAULT
    if args.summary and len(files) != 1:
        parser.error("--summary goes with exactly one expected file")
    here = environment()
    status = 0
    for path in files:
        expected = json.loads(path.read_text())
        summary_path = args.summary or REPO / expected["summary"]
        print(f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}: {summary_path}")
        if not summary_path.is_file():
            print(f"  no {summary_path}: run `{expected['demo']}` first", file=sys.stderr)
            status = max(status, 2)
            continue
        summary = json.loads(summary_path.read_text())
        if args.record:
            for name, want in expected["figures"].items():
                want["value"] = round(figure(summary, name), 6)
            expected["environment"] = here
            path.write_text(json.dumps(expected, indent=2) + "\n")
            print(f"  recorded {len(expected['figures'])} figures")
            continue
        lines, failures = check(expected, summary)
        print("\n".join(lines))
        for failure in failures:
            print(f"{expected['demo']}: figure out of tolerance: {failure}", file=sys.stderr)
        if failures:
            status = max(status, 1)
            recorded = expected.get("environment", {})
            if here and recorded and here != recorded:
                print(
                    f"{expected['demo']}: the figures were recorded with {recorded}, this machine has {here}: "
                    "other CPU kernels train on other floats and can move the figures (docs/log.md)",
                    file=sys.stderr,
                )
    return status


if __name__ == "__main__":
    sys.exit(main())
