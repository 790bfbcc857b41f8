"""Gold: one typed Delta table per upstream table, as of a changefeed's watermark.

The pieces the Compact stage (stages/compact.py) is built from:

- ``ddl``: a parser of the DDL queries TiCDC sends (CREATE/ALTER/RENAME/TRUNCATE/DROP);
- ``types``: gold column types from MySQL type codes, flags and column definitions;
- ``convert``: silver row images → typed Arrow columns;
- ``catalog``: what the DDL log says about each table, and each DDL's effect on gold;
- ``plan``: the DDL timeline of a run (history, barriers);
- ``reduce``: Spark transforms from silver changes to the last change per key;
- ``tables``: typing a segment of changes, merging it, carrying out DDL effects;
- ``state``: the state table recording what each gold table reflects.
"""
