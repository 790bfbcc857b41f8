"""Column types: a DDL's type, with its synonyms and defaults resolved as MySQL stores them."""

from __future__ import annotations

from ticdc_lake.gold.ddl.cursor import Cursor
from ticdc_lake.gold.ddl.tokens import NUMBER, PUNCT, STRING, WORD
from ticdc_lake.gold.exceptions import DdlParseError

# Synonyms, as MySQL resolves them when it stores a column type.
_TYPE_SYNONYMS = {
    "integer": "int",
    "int1": "tinyint",
    "int2": "smallint",
    "int3": "mediumint",
    "int4": "int",
    "int8": "bigint",
    "middleint": "mediumint",
    "dec": "decimal",
    "numeric": "decimal",
    "fixed": "decimal",
    "real": "double",
    "float4": "float",
    "float8": "double",
    "character": "char",
    "nchar": "char",
    "nvarchar": "varchar",
}
_ENUM_TYPES = {"enum", "set"}
_TYPE_NAMES = {
    "tinyint", "smallint", "mediumint", "int", "bigint", "float", "double", "decimal", "bit",
    "bool", "boolean", "serial", "date", "time", "datetime", "timestamp", "year", "char",
    "varchar", "binary", "varbinary", "tinytext", "text", "mediumtext", "longtext", "tinyblob",
    "blob", "mediumblob", "longblob", "enum", "set", "json", "vector", "geometry", "point",
    "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
    "geometrycollection", *_TYPE_SYNONYMS,
}  # fmt: skip
# The words a type may start with: its name, or the first of DOUBLE PRECISION, LONG VARCHAR,
# NATIONAL CHAR, CHAR VARYING.
_TYPE_FIRST_WORDS = _TYPE_NAMES | {"double", "long", "national", "char"}


def column_type(cursor: Cursor) -> str:
    """A column's type, in ``mysql.parse_column_type`` form."""
    base = _type_name(cursor)
    arguments = _type_arguments(cursor, base) if cursor.is_punct("(") else []
    modifiers = []
    while word := cursor.accept("UNSIGNED", "SIGNED", "ZEROFILL"):
        if word != "SIGNED":
            modifiers.append(word.lower())
    return _type_text(base, arguments, modifiers)


def _type_name(cursor: Cursor) -> str:
    """The type's name, its synonyms and multi-word spellings resolved."""
    start = cursor.token
    if start.kind != WORD or start.text.lower() not in _TYPE_FIRST_WORDS:
        raise cursor.fail("a column type")
    base = cursor.advance().text.lower()
    if base == "national":
        base = cursor.expect("CHAR", "CHARACTER", "VARCHAR").lower()
    if base == "long":  # LONG VARCHAR / LONG VARBINARY / LONG: MEDIUMTEXT / MEDIUMBLOB
        base = "mediumblob" if cursor.accept("VARBINARY") else "mediumtext"
        cursor.accept("VARCHAR")
    if base == "double":
        cursor.accept("PRECISION")
    if base in ("char", "character") and cursor.accept("VARYING"):
        base = "varchar"
    return _TYPE_SYNONYMS.get(base, base)


def _type_arguments(cursor: Cursor, base: str) -> list[str]:
    """``(10, 2)`` or ENUM's ``('a', 'b')``: each argument's text, strings quoted."""
    arguments: list[str] = []
    cursor.advance()
    while not cursor.is_punct(")"):
        token = cursor.advance()
        if token.kind == STRING:
            arguments.append(_quote_element(token.text))
        elif token.kind == NUMBER:
            arguments.append(token.text)
        elif token.kind == WORD and token.text.startswith("_") and base in _ENUM_TYPES:
            continue  # a charset introducer before a member: _utf8mb4'a'
        elif not (token.kind == PUNCT and token.text == ","):
            raise DdlParseError(cursor.query, token.position, "a type argument", token.describe())
    cursor.advance()
    return arguments


def _type_text(base: str, arguments: list[str], modifiers: list[str]) -> str:
    """The type in ``mysql.parse_column_type`` form, with MySQL's defaults filled in."""
    if base in ("bool", "boolean"):
        return "tinyint(1)"
    if base == "serial":
        return "bigint(20) unsigned"
    if base == "float" and len(arguments) == 1:
        # FLOAT(p): a FLOAT up to 24 bits of precision, a DOUBLE above.
        base = "double" if int(arguments[0]) > 24 else "float"
        arguments = []
    if base == "decimal":  # DECIMAL is DECIMAL(10,0), DECIMAL(p) is DECIMAL(p,0)
        arguments = [*arguments, "10", "0"][:2] if not arguments else [*arguments, "0"][:2]
    text = base if not arguments else f"{base}({','.join(arguments)})"
    return " ".join([text, *modifiers])


def _quote_element(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"
