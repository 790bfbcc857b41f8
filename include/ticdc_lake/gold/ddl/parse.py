"""Parse one DDL query into its actions, and count the columns a query defines."""

from __future__ import annotations

from ticdc_lake.gold.ddl.actions import Action, AddColumns, CreateTable
from ticdc_lake.gold.ddl.parser import _Parser
from ticdc_lake.gold.exceptions import DdlParseError


def parse_ddl(query: str, default_schema: str) -> list[Action]:
    """The actions of one DDL query; unqualified tables are in ``default_schema``.

    Raises DdlParseError for a query it cannot read (the error names the position and what it
    expected there).
    """
    return _Parser(query, default_schema).statement()


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
