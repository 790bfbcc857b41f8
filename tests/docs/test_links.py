"""Every relative link in the README, docs/ and bench/README.md reaches a file, and its
#anchor a heading there: pages moved or retitled must not leave readers at a dead end."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "bench" / "README.md"]
FENCED = re.compile(r"```.*?```", re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#+\s+(.*)$", FENCED.sub("", page.read_text()), re.M):
        base = _anchor(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        yield base if count == 0 else f"{base}-{count}"


def _links(page: Path):
    for link in LINK.findall(FENCED.sub("", page.read_text())):
        if not re.match(r"[a-z][a-z0-9+.-]*:", link):
            yield link


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page):
    broken = []
    for link in _links(page):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in set(_anchors(target)):
            broken.append(f"{link}: no heading with that anchor")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)


def test_readme_fits_a_first_screen():
    assert len((REPO / "README.md").read_text().splitlines()) <= 250
