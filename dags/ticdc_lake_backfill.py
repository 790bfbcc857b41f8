"""
### ticdc_lake_backfill: re-derive a TS range from bronze and bring gold back to the watermark

For a range `start_ts` .. `end_ts` (inclusive; each a TSO such as `462873715384320000` or an
ISO-8601 time with a zone such as `2026-01-02T03:00:00+00:00`):

1. **plan** (plain Python, no Spark): checks the parameters (text that is neither a TSO nor a
   zoned time, an end before the start, a range above the lake's watermark, an unknown table
   fail here with the reason) and prints which bronze batches are re-derived and which gold
   tables are touched and rebuilt;
2. **should_run**: stops here on `dry_run`, or when the same backfill already ran and the lake
   has not changed since (a rerun changes nothing);
3. **backfill** (`spark_jobs/backfill.py`): re-derives silver for those bronze batches and
   rebuilds the touched changefeeds' gold to exactly the watermark;
4. **summary**: what was done (log and XCom); emits the rebuilt changefeeds' gold asset events.

`tables` (optional, `schema.table`) limits the gold tables rebuilt; silver is re-derived per
whole bronze batch.

From the UI: *Trigger DAG* and fill in the form. From the CLI:
`airflow dags trigger ticdc_lake_backfill -c '{"start_ts": "...", "end_ts": "..."}'`, or with
Airflow's own backfill, one run per hourly data interval [start, end) mapped to the TSOs
`start_ms << 18` .. `(end_ms << 18) - 1` (the interval holding the watermark ends at it):
`airflow backfill create --dag-id ticdc_lake_backfill --from-date 2026-01-02T00:00:00+00:00
--to-date 2026-01-02T05:00:00+00:00` (six runs: the dates are the first and last intervals'
starts). The DAG is not scheduled on its own: its scheduled runs (after unpausing it) skip.
The Spark job takes the pool `ticdc_lake`'s one slot, so it never runs while a stage of
`ticdc_lake` does.
"""

from __future__ import annotations

from airflow.sdk import DAG, CronDataIntervalTimetable, Param, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException
from ticdc_lake.airflow import dag_parts
from ticdc_lake.orchestration import PipelineSource, discover_configs

# Each interval of `airflow backfill create` is one run over that hour's TSOs.
INTERVAL_CRON = "0 * * * *"

PARAMS = {
    "start_ts": Param(
        "",
        type="string",
        title="Start TS",
        description="First TS of the range: a TSO, or an ISO-8601 time with a zone "
        "(2026-01-02T03:00:00+00:00). Empty: the run's data interval (airflow backfill create).",
    ),
    "end_ts": Param(
        "",
        type="string",
        title="End TS",
        description="Last TS of the range (inclusive), as start_ts; at most the lake's watermark.",
    ),
    "tables": Param(
        [],
        type="array",
        items={"type": "string"},
        title="Gold tables",
        description="schema.table names to rebuild; empty: every table the range touches.",
    ),
    "dry_run": Param(
        False,
        type="boolean",
        title="Dry run",
        description="Only print which bronze batches and gold tables would be touched.",
    ),
}


def plan_task(source: PipelineSource):
    @task(task_id="plan", retries=0)
    def plan() -> dict:
        """Check the parameters and say what the backfill would do; no Spark."""
        from ticdc_lake.backfill.plan import plan_backfill
        from ticdc_lake.config import load_config
        from ticdc_lake.errors import ConfigError
        from ticdc_lake.orchestration import BackfillParamError, requested_range

        context = get_current_context()
        params, run = context["params"], context["dag_run"]
        interval = None
        if run.run_type == "backfill":
            interval = (context["data_interval_start"], context["data_interval_end"])
        try:
            wanted = requested_range(params["start_ts"], params["end_ts"], interval)
            if wanted is None:
                if run.run_type == "scheduled":
                    raise AirflowSkipException(
                        "scheduled runs do nothing: trigger with start_ts and end_ts, or use "
                        "airflow backfill create"
                    )
                raise BackfillParamError("give start_ts and end_ts (a TSO or a zoned time)")
            planned = plan_backfill(
                load_config(source.config),
                *wanted,
                params["tables"],
                up_to_watermark=interval is not None and not params["start_ts"],
            )
        except (BackfillParamError, ConfigError) as exc:
            raise AirflowFailException(str(exc)) from None  # no retry: the input is wrong
        for line in planned.lines():
            print(line)
        return planned.to_dict() | {"dry_run": bool(params["dry_run"])}

    return plan()


@task.short_circuit
def should_run(planned: dict) -> bool:
    """Go on to the Spark job unless this is a dry run, the backfill is done, or empty."""
    if planned["dry_run"]:
        print("dry run: nothing written")
        return False
    if planned["done"]:
        print("this backfill already ran and the lake has not changed since: nothing to do")
        return False
    if not planned["batches"] and not planned["changefeeds"]:
        print("nothing in the range: nothing to do")
        return False
    return True


def backfill_dag(source: PipelineSource) -> DAG:
    with DAG(
        dag_id=source.backfill_dag_id,
        description=f"Backfill a TS range of {source.config}",
        doc_md=__doc__ + f"\n\nThis DAG's config: `{source.config}`.",
        schedule=CronDataIntervalTimetable(INTERVAL_CRON, timezone="UTC"),
        start_date=dag_parts.START_DATE,
        catchup=False,
        max_active_runs=1,
        default_args=dag_parts.default_args(),
        params=PARAMS,
        tags=[*dag_parts.TAGS, "backfill"],
    ) as dag:
        planned = plan_task(source)
        job = dag_parts.spark_job(
            source,
            "backfill",
            arguments=[
                "--start-ts",
                "{{ ti.xcom_pull(task_ids='plan')['start_ts'] }}",
                "--end-ts",
                "{{ ti.xcom_pull(task_ids='plan')['end_ts'] }}",
                "--tables",  # JSON: a table's name may hold a comma
                "{{ ti.xcom_pull(task_ids='plan')['tables'] | tojson }}",
            ],
            dags_file=__file__,
        )
        should_run(planned) >> job >> dag_parts.summary_task(source, ["backfill"], backfill=True)
    return dag


for _source in discover_configs():
    globals()[_source.backfill_dag_id] = backfill_dag(_source)
