"""A judge's prompt template and its parse rule: the text a judge model reads for one
response, and the score read back from what it writes.

The template is Python ``str.format`` text with named fields, and only these:

- ``{prompt}``: the task's prompt, the contents of its chat messages one per line (the
  system prompt first when the task has one), without the policy's chat markup;
- ``{response}``: the response, decoded with the policy's tokenizer (required: a judge that
  does not see the response cannot score it);
- ``{answer}``: the task's reference answer ("" when it has none).

Literal braces are written doubled (``{{`` and ``}}``). A field may not carry a format spec or
a conversion (``{response!r}``, ``{answer:>5}``): the text goes in as it is.

The parse rule is a regular expression with exactly one capture group, searched for in the
judge's output; the group's text, as a Python ``float``, is the score (the last match by
default: a judge that reasons before its verdict may mention other numbers first). Checked
at start: the rule compiles, has one group, and that group on its own can match a number
(one of :data:`NUMBER_PROBES`). Whether the rest of the rule ever matches what the judge
writes only the run can tell: each miss is a parse failure, counted.

Nothing here knows models or tokenizers.
"""

from __future__ import annotations

import math
import re
import string

from roles.rewards.learned.base import ScoreItem

FIELDS = ("prompt", "response", "answer")
# Numbers a score group must be able to match on its own, one at least (float() reads them all).
NUMBER_PROBES = ("7", "0", "10", "100", "-1", "+2", "3.5", "0.25", ".5", "1e3")


def check_template(template: str) -> str:
    """``template`` when its fields are the known ones and ``{response}`` is among them, else
    a ``ValueError`` saying what is wrong."""
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as e:
        raise ValueError(f"cannot read the template ({e}); write literal braces as {{{{ and }}}}") from None
    named = set()
    for _text, name, spec, conversion in parts:
        if name is None:
            continue
        if name not in FIELDS:
            shown = "{" + name + "}"
            raise ValueError(
                f"unknown field {shown} (the fields are {{prompt}}, {{response}} and {{answer}}; "
                "write literal braces as {{ and }})"
            )
        if spec or conversion:
            raise ValueError(f"field {{{name}}} has a format spec or conversion; write it plain")
        named.add(name)
    if "response" not in named:
        raise ValueError("the template has no {response} field: the judge would not see the response it scores")
    return template


def fill(template: str, item: ScoreItem) -> str:
    """The template with ``item``'s prompt, response and reference answer in its fields."""
    prompt = "\n".join(str(m.get("content", "")) for m in item.messages)
    answer = getattr(item.example, "answer", "") or ""
    return template.format(prompt=prompt, response=item.response, answer=str(answer))


def check_parse_rule(rule: str) -> re.Pattern:
    """The compiled rule, or a ``ValueError``: it does not compile, has other than one
    capture group, or its group cannot match a number."""
    try:
        pattern = re.compile(rule)
    except re.error as e:
        raise ValueError(f"{rule!r} is not a regular expression ({e})") from None
    if pattern.groups != 1:
        raise ValueError(
            f"{rule!r} has {pattern.groups} capture groups; it needs exactly one, around the score "
            "(write other groups as (?:...))"
        )
    inner = capture_group_text(rule)
    try:
        group = re.compile(inner, pattern.flags) if inner is not None else None
    except re.error:
        group = None  # the group does not stand alone (an odd verbose-mode rule): not checked
    if group is not None and not any(group.fullmatch(p) for p in NUMBER_PROBES):
        raise ValueError(
            f"the capture group of {rule!r}, ({inner}), cannot match a number (tried "
            f"{', '.join(NUMBER_PROBES)}), so no output would ever score"
        )
    return pattern


def capture_group_text(rule: str) -> str | None:
    """The source text inside ``rule``'s one capturing group (``(...)`` or ``(?P<name>...)``),
    skipping escapes and character classes; None when none is found."""
    i, start, depth = 0, None, 0
    while i < len(rule):
        c = rule[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":  # a class: up to its closing ']' (one right after '[' or '[^' is literal)
            i += 2 if rule.startswith("^", i + 1) else 1
            i += 1 if rule.startswith("]", i) else 0
            while i < len(rule) and rule[i] != "]":
                i += 2 if rule[i] == "\\" else 1
        elif c == "(" and start is not None:
            depth += 1
        elif c == "(" and not rule.startswith("?", i + 1):
            start, depth = i + 1, 1
        elif c == "(" and rule.startswith("?P<", i + 1):
            start, depth = rule.find(">", i) + 1, 1
            i = start - 1
        elif c == ")" and start is not None:
            depth -= 1
            if depth == 0:
                return rule[start:i]
        i += 1
    return None


def parse_score(text: str, pattern: re.Pattern, last: bool = True) -> float | None:
    """The score in a judge's ``text``: the rule's group in its last (or first) match, as a
    finite float; None when the rule does not match or the group is not such a number."""
    matches = list(pattern.finditer(text))
    if not matches:
        return None
    captured = matches[-1 if last else 0].group(1)
    return _number(captured) if captured is not None else None


def _number(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None
