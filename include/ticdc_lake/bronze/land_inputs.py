"""Which files land may open: the config's input globs, kept inside the folders they name.

A pattern's fixed part (before its first wildcard) is the folder it may not leave: a match
whose real path (links resolved) lies outside is refused, and a pattern whose folder is the
filesystem root is a config error. Only regular files are taken: a device, FIFO or socket is
refused without being opened. Listing is bounded: ``*``, ``?`` and ``[...]`` match one name,
only ``**`` descends (never through a linked directory, so a link loop ends), and a directory
that matches is expanded one level (a Spark export is a directory of part files).

Refused matches are returned with the reason, for the stage's result: never dropped silently.
Hidden and bookkeeping names below the fixed part (starting with "." or "_": ``_SUCCESS``,
``.crc``, ``_temporary/``) are skipped without a word, as Spark does.

An ``s3://bucket/...`` pattern follows the same rules on an object store's keys
(``discover_objects``): the objects under its fixed prefix are listed, and their keys matched a
"/"-separated name at a time; there are no links or special files to refuse.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ticdc_lake.errors import ConfigError
from ticdc_lake.storage import ObjectInfo, S3Settings, list_objects

_WILDCARDS = "*?["


@dataclass(frozen=True)
class Refused:
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass
class Discovered:
    files: list[str] = field(default_factory=list)  # real paths of regular files, sorted
    refused: list[Refused] = field(default_factory=list)  # sorted by path
    objects: dict[str, ObjectInfo] = field(default_factory=dict)  # of the s3:// files: by URI


def discover_files(patterns: Iterable[str] | str, exclude: Iterable[str | Path] = ()) -> Discovered:
    """The regular files the glob ``patterns`` match inside their folders, minus those under
    ``exclude`` (the lake's own files), and the matches refused, with why."""
    if isinstance(patterns, str):  # one pattern, not a list of one-character patterns
        patterns = [patterns]
    excluded = [os.path.realpath(path) for path in exclude]
    files: set[str] = set()
    refused: dict[str, str] = {}
    for pattern in patterns:
        folder, named, parts = _split(pattern)
        for match in _matches(folder, parts):
            for path, reason in _take(match, folder, named):
                if any(_is_under(path, root) for root in excluded):
                    continue
                if reason is None:
                    files.add(path)
                else:
                    refused.setdefault(path, reason)
    return Discovered(
        sorted(files), [Refused(path, reason) for path, reason in sorted(refused.items())]
    )


def _split(pattern: str) -> tuple[str, str, list[str]]:
    """(the folder a pattern may not leave, the pattern's part without wildcards, the names
    below the folder). A pattern without wildcards names a file (its folder is the file's
    directory) or a directory (itself)."""
    if not pattern.strip():
        raise ConfigError("inputs: an empty pattern names no folder")
    names = Path(os.path.abspath(pattern)).parts  # ".." resolved here: none is left below
    fixed = next((i for i, name in enumerate(names) if _has_wildcard(name)), len(names))
    named = os.path.join(*names[:fixed])
    if fixed == len(names) and not os.path.isdir(pattern):
        fixed -= 1
    folder, parts = os.path.join(*names[:fixed]), list(names[fixed:])
    if os.path.realpath(folder) == "/":
        raise ConfigError(
            f"inputs: pattern {pattern!r} would search the whole filesystem from /; name the "
            "folder the exports are in (e.g. /data/exports/*.jsonl)"
        )
    return folder, named, parts


def _has_wildcard(name: str) -> bool:
    return any(char in name for char in _WILDCARDS)


def _entries(directory: str) -> list[os.DirEntry]:
    try:
        with os.scandir(directory) as entries:
            return list(entries)
    except OSError:  # not a directory, gone, unreadable: nothing matches below it
        return []


def _visible(name: str, part: str) -> bool:
    """As glob: a wildcard does not match a leading dot unless the pattern has one."""
    return not name.startswith(".") or part.startswith(".")


def _matches(directory: str, parts: list[str]) -> Iterator[str]:
    """Paths below ``directory`` matching ``parts``, one name per part (``**``: any depth)."""
    if not parts:
        yield directory
        return
    part, rest = parts[0], parts[1:]
    if part == "**":
        yield from _matches(directory, rest)
        for entry in _entries(directory):
            if _visible(entry.name, part) and entry.is_dir(follow_symlinks=False):
                yield from _matches(entry.path, parts)
    elif not _has_wildcard(part):
        path = os.path.join(directory, part)
        if os.path.lexists(path):
            yield from _matches(path, rest)
    else:
        for entry in _entries(directory):
            if _visible(entry.name, part) and fnmatch.fnmatchcase(entry.name, part):
                yield from _matches(entry.path, rest)


def _take(match: str, folder: str, named: str) -> Iterator[tuple[str, str | None]]:
    """(real path, None) for a regular file to land, (path, reason) for a refused one; a
    directory gives its own entries, one level down. Hidden names count below ``named``."""
    if _hidden(os.path.relpath(match, named)):
        return
    real = os.path.realpath(match)
    root = os.path.realpath(folder)
    if not _is_under(real, root):
        yield match, f"resolves to {real}, outside {root} (the pattern's folder); not opened"
        return
    try:
        mode = os.lstat(real).st_mode
    except OSError as exc:
        yield match, f"cannot be examined: {exc}"
        return
    if stat.S_ISREG(mode):
        yield real, None
    elif stat.S_ISDIR(mode):
        for entry in _entries(real):
            if _hidden(entry.name):
                continue
            path = os.path.join(match, entry.name)
            if entry.is_dir():
                yield path, "a directory inside a matched directory: not searched (use ** to)"
            else:
                yield from _take(path, folder, named)
    else:
        yield match, f"is {_kind(mode)}, not a regular file; not opened"


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a file"


def _is_under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _hidden(relative: str) -> bool:
    return any(
        part.startswith((".", "_")) for part in Path(relative).parts if part not in (".", "..")
    )


# --- object stores ---------------------------------------------------------------------------


def discover_objects(patterns: Iterable[str], s3: S3Settings | None) -> Discovered:
    """The objects the ``s3://`` patterns match under their fixed prefixes, and the matches
    refused (an object deeper than a matched "directory"), with why."""
    objects: dict[str, ObjectInfo] = {}
    refused: dict[str, str] = {}
    for pattern in patterns:
        prefix, parts = _split_key_pattern(pattern)
        for found in list_objects(prefix, s3):
            below = found.uri[len(prefix) :]
            if below and not prefix.endswith("/") and not below.startswith("/"):
                continue  # a key sharing the prefix's letters: "a/bc" under prefix "a/b"
            names = [name for name in below.split("/") if name]
            if found.uri.endswith("/") or _hidden("/".join(names)):
                continue  # a folder marker, or bookkeeping (_SUCCESS, .crc, _temporary/)
            verdict = _object_verdict(names, parts)
            if verdict is None:
                objects[found.uri] = found
            elif verdict:
                refused.setdefault(found.uri, verdict)
    return Discovered(
        sorted(objects),
        [Refused(uri, reason) for uri, reason in sorted(refused.items())],
        objects,
    )


def _split_key_pattern(pattern: str) -> tuple[str, list[str]]:
    """(the ``s3://bucket/prefix`` listed, the names below it). Without wildcards the pattern
    names an object or a "directory", itself listed."""
    scheme, _, rest = pattern.partition("://")
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise ConfigError(f"inputs: pattern {pattern!r} names no bucket (s3://bucket/prefix/*)")
    names = [name for name in key.split("/") if name]
    if ".." in names or "." in names:
        raise ConfigError(f"inputs: pattern {pattern!r}: object keys have no . or .. to resolve")
    fixed = next((i for i, name in enumerate(names) if _has_wildcard(name)), len(names))
    return f"{scheme}://{bucket}/" + "/".join(names[:fixed]), names[fixed:]


def _object_verdict(names: list[str], parts: list[str]) -> str | None:
    """None: the key's names below the prefix match ``parts`` (or are an entry of a matched
    "directory"); a reason to refuse it; "" when it does not match at all."""
    lengths = _matched_lengths(names, parts)
    if len(names) in lengths or len(names) - 1 in lengths:
        return None
    if any(length < len(names) - 1 for length in lengths):
        return "an object inside a matched directory's subdirectory: not searched (use ** to)"
    return ""


def _matched_lengths(names: list[str], parts: list[str], start: int = 0) -> set[int]:
    """How many of ``names`` from ``start`` on ``parts`` can match, whole (``**``: any number
    of names, none of them hidden, as they were skipped)."""
    if not parts:
        return {start}
    part, rest = parts[0], parts[1:]
    if part == "**":
        found = _matched_lengths(names, rest, start)
        for end in range(start + 1, len(names) + 1):
            found |= _matched_lengths(names, rest, end)
        return found
    if start < len(names) and fnmatch.fnmatchcase(names[start], part):
        return _matched_lengths(names, rest, start + 1)
    return set()
