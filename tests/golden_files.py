"""Golden files: a command's whole output kept in tests/golden/ and compared exactly, after what
changes from run to run (durations, temporary paths) is masked. A change to the output shows as
a diff in the test and in review; ``UPDATE_GOLDEN=1 pytest <test>`` rewrites the files the test
compares, to commit with the change that meant it.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = "UPDATE_GOLDEN"
SECONDS = re.compile(r" *\b\d+\.\d+ s\b")  # with the spaces before it


def assert_golden(name: str, actual: str) -> None:
    """``actual`` is tests/golden/``name`` exactly (or becomes it, with UPDATE_GOLDEN=1)."""
    path = GOLDEN / name
    if os.environ.get(UPDATE) == "1":
        path.write_text(actual, encoding="utf-8")
        return
    if not path.is_file():
        pytest.fail(f"{path} missing: {UPDATE}=1 writes it", pytrace=False)
    expected = path.read_text(encoding="utf-8")
    if actual != expected:
        diff = difflib.unified_diff(
            expected.splitlines(keepends=True), actual.splitlines(keepends=True), name, "this run"
        )
        pytest.fail(
            f"the output is not {path} ({UPDATE}=1 rewrites it when that is meant):\n"
            + "".join(diff),
            pytrace=False,
        )


def mask_paths(text: str, paths: dict[Path, str]) -> str:
    """Each path replaced by its name in angle brackets: ``{tmp_path: "sample"}`` -> <sample>."""
    for path, name in sorted(paths.items(), key=lambda item: -len(str(item[0]))):
        text = text.replace(str(path), f"<{name}>")
    return text


def mask_seconds(text: str) -> str:
    """Durations printed as ``1.8 s`` become ``<s>``; one padded into a column keeps its width
    (``"   1.8 s"`` and ``"  12.8 s"`` are both ``"     <s>"``), one in a sentence its space."""

    def masked(seconds: re.Match) -> str:
        spaces = len(seconds[0]) - len(seconds[0].lstrip(" "))
        return "<s>".rjust(len(seconds[0])) if spaces > 1 else " " * spaces + "<s>"

    return SECONDS.sub(masked, text)


def mask_keys(document, keys: set[str]):
    """A JSON document with the value of each of ``keys``, at any depth, replaced by "<key>"."""
    if isinstance(document, dict):
        return {k: f"<{k}>" if k in keys else mask_keys(v, keys) for k, v in document.items()}
    if isinstance(document, list):
        return [mask_keys(item, keys) for item in document]
    return document
