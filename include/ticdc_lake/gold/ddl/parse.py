"""Parse one DDL query into its actions, and count the columns a query defines."""

from __future__ import annotations

from collections.abc import Callable

from ticdc_lake.gold.ddl.actions import Action, AddColumns, CreateTable, NoOp
from ticdc_lake.gold.ddl.alter import alter
from ticdc_lake.gold.ddl.create import create
from ticdc_lake.gold.ddl.cursor import Cursor
from ticdc_lake.gold.ddl.drop import drop, truncate
from ticdc_lake.gold.ddl.rename import rename
from ticdc_lake.gold.exceptions import DdlParseError

# Each statement's grammar, by its first word.
_STATEMENTS: dict[str, Callable[[Cursor], list[Action]]] = {
    "CREATE": create,
    "ALTER": alter,
    "DROP": drop,
    "RENAME": rename,
    "TRUNCATE": truncate,
}
_NOOP_VERBS = ("GRANT", "REVOKE", "SET", "FLUSH", "ANALYZE", "USE")


def parse_ddl(query: str, default_schema: str) -> list[Action]:
    """The actions of one DDL query; unqualified tables are in ``default_schema``.

    Raises DdlParseError for a query it cannot read (the error names the position and what it
    expected there).
    """
    cursor = Cursor(query, default_schema)
    while cursor.accept_punct(";"):
        pass
    verb = cursor.expect(*_STATEMENTS, *_NOOP_VERBS)
    if verb in _NOOP_VERBS:
        return [NoOp(None, f"{verb} statement")]
    actions = _STATEMENTS[verb](cursor)
    cursor.expect_end()
    return actions


# The shortest column definition: a one-character name, a space and a three-letter type (a INT).
SHORTEST_COLUMN_TEXT = 5


def defined_columns(query: str, default_schema: str, at_most: int) -> int:
    """How many columns the query's CREATE TABLE or ADD COLUMNs define, when that may be more
    than ``at_most`` (0 when the query is too short to hold more, or cannot be read: gold
    decides then). A text of n columns is at least n x SHORTEST_COLUMN_TEXT long, so most
    queries are not parsed here at all."""
    if len(query) <= at_most * SHORTEST_COLUMN_TEXT:
        return 0
    try:
        actions = parse_ddl(query, default_schema)
    except DdlParseError:
        return 0
    defining = [a for a in actions if isinstance(a, (CreateTable, AddColumns))]
    return sum(len(action.columns) for action in defining)  # ADD COLUMN a, ADD COLUMN b, ...
