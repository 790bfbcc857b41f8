"""Backfills by TS range: re-derive silver from bronze for the batches touching a range and
bring gold back to exactly the watermark.

    plan_backfill(config, start_ts, end_ts, tables) -> BackfillPlan   # delta-rs only (plan.py)
    run_backfill(spark, config, start_ts, end_ts, tables) -> BackfillResult   # Spark (run.py)
"""
