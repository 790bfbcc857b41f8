"""Gold: one typed Delta table per upstream table, as of a changefeed's watermark.

The pieces the Compact stage (gold/compact.py) is built from:

- ``ddl``: a parser of the DDL queries TiCDC sends (CREATE/ALTER/RENAME/TRUNCATE/DROP);
- ``types``: gold column types from MySQL type codes, flags and column definitions;
- ``convert``: silver row images → typed Arrow columns;
- ``catalog``: what the DDL log says about each table, and each DDL's effect on gold;
- ``plan``: the DDL timeline of a run (history, barriers);
- ``feed``: what a changefeed's run is to do (mode, target TS, where it starts);
- ``reduce``: Spark transforms from silver changes to the last change per key;
- ``changes``: a run's input, read from silver and reduced by segment;
- ``tables``: typing a segment of changes, merging it, carrying out DDL effects;
- ``steps``: a run's segments and DDL barriers carried out on gold in commit order;
- ``outcome``, ``reasons``: the state rows and results a run leaves, and why a table is
  knowingly not what upstream held;
- ``state``: the state table recording what each gold table reflects.
"""
