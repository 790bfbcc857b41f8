"""Partition values: their text in the Delta log and in directory names.

Files go under ``col=value/`` directories like delta-rs and Spark write them, so that Spark's
partition discovery (``basePath``) reads the partition columns back from the paths. The value is
escaped the Hive way in the directory name (``:`` → ``%3A``), and the ``add`` action's path is a
URI: delta-rs percent-encodes the file system path it is given once more (``%3A`` → ``%253A``)
when it writes the log, and decodes it when it reads the log.
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import unquote

NULL_DIRECTORY = "__HIVE_DEFAULT_PARTITION__"

# Characters Hive and Spark escape in partition directory names, plus the space (delta-rs
# escapes it and Spark unescapes any %XX).
_ESCAPED = frozenset("\"#%'*/:=?\\\x7f{[]^ ") | frozenset(chr(c) for c in range(0x20))


def value_text(value: Any) -> str | None:
    """A partition value as the Delta protocol writes it; the empty string is null (as in Spark)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.date):
        return value.isoformat()
    text = str(value)
    return text if text else None


def escape(text: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in text)


def directory(values: dict[str, str | None]) -> str:
    """``a=1/b=x%3Ay``: the directory of a file with these partition values (in order)."""
    return "/".join(
        f"{escape(name)}={NULL_DIRECTORY if text is None else escape(text)}"
        for name, text in values.items()
    )


def directory_values(relative_path: str) -> dict[str, str | None]:
    """The ``col=value`` pairs in a file's directory names, unescaped (what Spark will read)."""
    values: dict[str, str | None] = {}
    for segment in relative_path.split("/")[:-1]:
        name, sep, text = segment.partition("=")
        if not sep:
            continue
        values[unquote(name)] = None if text == NULL_DIRECTORY else unquote(text)
    return values
