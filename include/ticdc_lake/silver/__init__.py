"""Silver: bronze's records decoded into change rows, DDL and resolved TS (decode.py),
and the changefeeds' global watermark (watermark.py); the decoders' shared model (events,
values, mysql, codecs, schema_registry, claimcheck) and the row contract (rows.py)."""
