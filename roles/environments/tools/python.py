"""The ``python`` tool: runs the model's code in a sandboxed child process (``python_sandbox``).

The observation is what the code printed: stdout, then stderr under a ``[stderr]`` line, a
note when the output was cut at ``max_output_chars`` or the code exited with an error code.
A run past ``timeout_s`` is a ToolError ("timed out after N s"), as is a run killed by a
limit. Not known here: how the child is confined (``python_sandbox``), episodes.
"""

from __future__ import annotations

import signal
from typing import Any, ClassVar

from pydantic import Field

from roles.environments.tools.base import Tool, ToolConfig, ToolError
from roles.environments.tools.python_sandbox import run_code


class PythonConfig(ToolConfig):
    # One run's wall-clock limit; keep it under environment.timeout_s, which kills the worker.
    timeout_s: float = Field(10.0, gt=0, le=3600)
    memory_mb: int = Field(1024, ge=64)  # the child's address space (RLIMIT_AS)
    max_output_chars: int = Field(4000, ge=1)  # stdout's first and stderr's last, each


class PythonTool(Tool):
    name: ClassVar[str] = "python"
    description: ClassVar[str] = (
        "Run a Python 3 program and return what it prints (stdout, then stderr). Each call starts "
        "afresh in an empty folder, without network access; print the values you need."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"code": {"type": "string", "description": "the program to run"}},
        "required": ["code"],
        "additionalProperties": False,
    }
    Config: ClassVar[type[ToolConfig]] = PythonConfig

    def __call__(self, code: str) -> str:  # type: ignore[override]
        cfg = self.config
        outcome = run_code(code, cfg.timeout_s, cfg.memory_mb, cfg.max_output_chars)
        if outcome.timed_out:
            raise ToolError(f"timed out after {cfg.timeout_s:g} s")
        parts = [outcome.stdout] if outcome.stdout else []
        if outcome.stderr:
            parts.append(f"[stderr]\n{outcome.stderr}")
        if outcome.cut:
            parts.append(f"[output cut at {cfg.max_output_chars} characters]")
        code_note = _exit_note(outcome.returncode)
        if code_note:
            parts.append(code_note)
        return "\n".join(p.rstrip("\n") for p in parts)


def _exit_note(returncode: int | None) -> str:
    if not returncode:
        return ""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        reason = {"SIGXCPU": " (CPU time limit)", "SIGXFSZ": " (file size limit)"}.get(name, "")
        return f"[killed by {name}{reason}]"
    return f"[exit code {returncode}]"
