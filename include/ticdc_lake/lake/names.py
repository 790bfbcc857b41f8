"""Upstream names as people read them: ``schema.table``, quoted where a part would mislead.

TiDB allows nearly any character in a quoted identifier, so ``a.b``.``c`` and ``a``.``b.c``
are two tables. A part that is not a plain identifier (letters, digits, ``_``, ``$``, not all
digits) is written in backticks, a backtick in it doubled, as MySQL writes it: the two tables
read `` `a.b`.c `` and `` a.`b.c` ``.
"""

from __future__ import annotations

import re

_PLAIN = re.compile(r"[\w$]+")


def backticked(name: str) -> str:
    """``name`` as a MySQL quoted identifier: in backticks, a backtick in it doubled."""
    return "`" + name.replace("`", "``") + "`"


def quoted_part(name: str) -> str:
    """One part of a qualified name: as it is when plain, else in backticks."""
    if _PLAIN.fullmatch(name) and not name.isdigit():
        return name
    return backticked(name)


def qualified_name(schema: str, table: str) -> str:
    """``schema.table``, each part quoted when it is not plain (``quoted_part``)."""
    return f"{quoted_part(schema)}.{quoted_part(table)}"


def split_name(text: str) -> tuple[str, str]:
    """(schema, table) of a ``qualified_name`` (plain or backtick-quoted parts); ValueError
    for text that is not one."""
    parts, at = [], 0
    while True:
        if text.startswith("`", at):
            part, at = _quoted_part(text, at)
        else:
            end = text.find(".", at)
            end = len(text) if end < 0 else end
            part, at = text[at:end], end
            if not part or "`" in part:
                raise ValueError(f"{text!r} is not a table name (schema.table)")
        parts.append(part)
        if at == len(text) and len(parts) == 2:
            return parts[0], parts[1]
        if len(parts) == 2 or not text.startswith(".", at):
            raise ValueError(f"{text!r} is not a table name (schema.table)")
        at += 1


def _quoted_part(text: str, start: int) -> tuple[str, int]:
    """The name quoted at ``text[start]`` (a backtick) and where it ends."""
    out, at = [], start + 1
    while True:
        end = text.find("`", at)
        if end < 0:
            raise ValueError(f"{text!r}: a backtick at {start} is not closed")
        out.append(text[at:end])
        if not text.startswith("``", end):
            return "".join(out), end + 1
        out.append("`")
        at = end + 2
