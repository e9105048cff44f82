"""The ``calculator`` tool: arithmetic on numbers, evaluated from Python's ``ast`` (never ``eval``).

Numbers, ``+ - * / // % **``, unary ``+ -`` and parentheses; nothing else (no names, calls,
attributes, comparisons). Sizes are bounded before they are computed: an exponent over
``MAX_EXPONENT`` in size, or an integer result over ``MAX_BITS`` bits, is an error, so
``9**9**9`` costs nothing. An integral result reads as an integer ("579", never "579.0").
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any, ClassVar

from roles.environments.tools.base import Tool, ToolError

MAX_EXPONENT = 10_000
MAX_BITS = 4096  # about 1233 decimal digits
MAX_EXPRESSION_CHARS = 1000

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def _bits(value: int | float) -> int:
    return abs(int(value)).bit_length() if isinstance(value, int) else 0


def _check_size(op: type, left: int | float, right: int | float) -> None:
    """Refuse an operation whose integer result would pass MAX_BITS, before computing it."""
    if op is ast.Pow:
        if abs(right) > MAX_EXPONENT:
            raise ToolError(f"exponent {right:g} is too large (at most {MAX_EXPONENT})")
        if isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and _bits(left) * right > MAX_BITS:
            raise ToolError(f"the result is too large (over {MAX_BITS} bits)")
    elif op is ast.Mult and _bits(left) + _bits(right) > MAX_BITS + 1:
        raise ToolError(f"the result is too large (over {MAX_BITS} bits)")


def _evaluate(node: ast.AST) -> int | float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        _check_size(type(node.op), left, right)
        try:
            result = _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ToolError("division by zero") from None
        except OverflowError:
            raise ToolError("the result is too large") from None
        if isinstance(result, complex):
            raise ToolError("the result is not a real number")
        if isinstance(result, int) and result.bit_length() > MAX_BITS:
            raise ToolError(f"the result is too large (over {MAX_BITS} bits)")
        return result
    what = type(node).__name__
    if isinstance(node, ast.Constant):
        what = f"the constant {node.value!r}"
    raise ToolError(f"unsupported expression: {what} (numbers, + - * / // % ** and parentheses only)")


def format_number(value: int | float) -> str:
    """``value`` as text: integral values as integers, other floats as Python writes them."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ToolError("the result is not a finite number")
        if value.is_integer() and abs(value) < 1e16:
            return str(int(value))
        return repr(value)
    return str(value)


def evaluate(expression: str) -> str:
    """The value of an arithmetic ``expression`` as text; ToolError says what is wrong."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"the expression is too long (over {MAX_EXPRESSION_CHARS} characters)")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as e:
        raise ToolError(f"not an arithmetic expression: {e.msg}") from None
    except (ValueError, MemoryError, RecursionError):  # null bytes, absurd nesting
        raise ToolError("not an arithmetic expression") from None
    try:
        return format_number(_evaluate(tree))
    except RecursionError:
        raise ToolError("the expression is nested too deeply") from None


class Calculator(Tool):
    name: ClassVar[str] = "calculator"
    description: ClassVar[str] = (
        "Evaluate an arithmetic expression: numbers, + - * / // % ** and parentheses. Returns the value."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"expression": {"type": "string", "description": "for example (123 + 456) * 2"}},
        "required": ["expression"],
        "additionalProperties": False,
    }

    def __call__(self, expression: str) -> str:  # type: ignore[override]
        return evaluate(expression)
