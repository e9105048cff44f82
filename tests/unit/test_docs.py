"""README.md and docs/*.md: every relative link names a file of the repository that exists, and
every ``#anchor`` a heading of the page it points at (GitHub's rule for a heading's anchor)."""

import re
from pathlib import Path

import pytest

from support.paths import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def outside_fences(markdown: str) -> list[str]:
    """The lines of a page that are not inside a fenced code block."""
    lines, fence = [], None
    for line in markdown.splitlines():
        opening = re.match(r"^\s*(`{3,}|~{3,})", line)
        if fence is None and opening:
            fence = opening.group(1)
        elif fence is not None and line.strip().startswith(fence):
            fence = None
        elif fence is None:
            lines.append(line)
    return lines


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation (backticks too) dropped,
    spaces to hyphens, a repeated one suffixed -1, -2, ..."""
    found, seen = set(), {}
    for line in outside_fences(page.read_text()):
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(f"{slug}-{count}" if count else slug)
    return found


def relative_links(page: Path) -> list[str]:
    """The links of a page's prose (not of its code blocks or code spans) that name no scheme."""
    prose = [re.sub(r"`[^`]*`", "``", line) for line in outside_fences(page.read_text())]
    return [link for line in prose for link in LINK.findall(line) if not re.match(r"^[a-z][a-z+.-]*:", link)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(page):
    broken = []
    for link in relative_links(page):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if REPO.resolve() not in (target, *target.parents) or "shared" in Path(path).parts:
            broken.append(f"{link}: outside the repository")
        elif not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{link}: no such heading")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)
