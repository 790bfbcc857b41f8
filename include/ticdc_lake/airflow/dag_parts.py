"""The pieces both DAG files are wired from: default task arguments, the lake's Assets and a
spark-submit task running one of the spark_jobs/ entry points.

Imported at parse time: Airflow and the standard library only (no pyspark, no Delta, no config
read). What the Spark jobs need comes from the environment, read here by name only:

| variable                       | default                                                 |
|--------------------------------|---------------------------------------------------------|
| TICDC_LAKE_SCHEDULE            | ``@hourly``: the pipeline's schedule (cron or preset)   |
| TICDC_LAKE_SPARK_JOBS          | ``spark_jobs/`` beside ``dags/``                        |
| TICDC_LAKE_PYTHON              | the Python running Airflow (the venv's): driver, executors |
| TICDC_LAKE_SPARK_SUBMIT        | ``spark-submit`` beside that Python (pyspark's)         |
| TICDC_LAKE_RUN_DIR             | ``$AIRFLOW_HOME/ticdc_lake_runs``: each job's JSON result |
| TICDC_LAKE_DRIVER_JAVA_OPTIONS | ``orchestration.driver_java_options``; empty: none given |
"""

from __future__ import annotations

import datetime as dt
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from airflow.sdk import Asset, AssetAlias, get_current_context, task

from ticdc_lake.airflow.spark_submit import SPARK_CONNECTION, SparkJobOperator
from ticdc_lake.orchestration import (
    POOL,
    PipelineSource,
    run_dir,
    spark_jobs_dir,
    spark_submit_binary,
    spark_submit_conf,
    spark_submit_env,
)

OWNER = "data-platform"
START_DATE = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
TAGS = ["ticdc", "lakehouse", "spark"]


def default_args() -> dict:
    """Retries with backoff for every task: a Spark job that failed on a lost executor or a
    busy machine is rerun (every stage is idempotent), waiting 1, 2, 4 ... minutes."""
    return {
        "owner": OWNER,
        "retries": 2,
        "retry_delay": dt.timedelta(minutes=1),
        "retry_exponential_backoff": 2.0,
        "max_retry_delay": dt.timedelta(minutes=15),
    }


def schedule(environ: Mapping[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    return environ.get("TICDC_LAKE_SCHEDULE", "").strip() or "@hourly"


# --- Assets ---------------------------------------------------------------------------------


def bronze_asset(source: PipelineSource) -> Asset:
    return Asset(name=f"{source.pipeline_dag_id}.bronze", group="ticdc_lake")


def silver_asset(source: PipelineSource) -> Asset:
    return Asset(name=f"{source.pipeline_dag_id}.silver", group="ticdc_lake")


def gold_alias(source: PipelineSource) -> AssetAlias:
    """Gold's changefeeds are only known once the config is read (at run time): the summary
    task emits one ``gold_asset`` event per changefeed whose gold changed, through this alias."""
    return AssetAlias(name=f"{source.pipeline_dag_id}.gold", group="ticdc_lake")


def gold_asset(source: PipelineSource, changefeed: str) -> Asset:
    """A changefeed's gold tables: schedule a downstream DAG on ``Asset(name=...)`` of this."""
    return Asset(name=f"{source.pipeline_dag_id}.gold.{changefeed}", group="ticdc_lake")


# --- Spark jobs -----------------------------------------------------------------------------


def result_file(source: PipelineSource, job: str, environ: Mapping[str, str]) -> str:
    """Where a job of this DAG run leaves its JSON result (templated with the run id)."""
    folder = run_dir(environ) / source.pipeline_dag_id
    return str(folder / "{{ dag.dag_id }}" / "{{ run_id | replace(':', '_') }}" / f"{job}.json")


def run_folder(source: PipelineSource, dag_id: str, run_id: str) -> Path:
    """The folder ``result_file`` templates to, for the task that reads it."""
    return run_dir(os.environ) / source.pipeline_dag_id / dag_id / run_id.replace(":", "_")


def spark_job(
    source: PipelineSource,
    job: str,
    *,
    task_id: str | None = None,
    arguments: Sequence[str] = (),
    outlets: Sequence[Asset] = (),
    dags_file: str,
    environ: Mapping[str, str] | None = None,
    **task_args,
) -> SparkJobOperator:
    """A task running ``spark_jobs/<job>.py --config <config> --result-file ... <arguments>``
    through the ``spark_default`` connection (``local[*]`` when it is not defined: see
    ticdc_lake.airflow.spark_submit), in the lake's pool so no two Spark jobs of one lake run at
    once.
    ``dags_file`` is the calling DAG file: spark_jobs/ is found beside its folder;
    ``task_args`` go to the operator."""
    environ = os.environ if environ is None else environ
    python = environ.get("TICDC_LAKE_PYTHON") or sys.executable
    binary = spark_submit_binary(environ, python)
    application = spark_jobs_dir(environ, dags_file) / f"{job}.py"
    return SparkJobOperator(
        task_id=task_id or job,
        application=str(application),
        application_args=[
            "--config",
            str(source.config),
            "--result-file",
            result_file(source, task_id or job, environ),
            *arguments,
        ],
        conn_id=SPARK_CONNECTION,
        spark_binary=binary,
        name=f"ticdc-lake-{job}",
        conf=spark_submit_conf(environ, python),
        env_vars=spark_submit_env(python, job),
        pool=POOL,
        outlets=list(outlets),
        **task_args,
    )


def summary_task(source: PipelineSource, jobs: Sequence[str], **event_extra):
    """The run's last task: fold the ``jobs``' result files into the run's summary, log it,
    return it (XCom), and emit a gold asset event (with ``event_extra``) for each changefeed
    whose gold changed."""
    jobs = tuple(jobs)

    @task(task_id="summary", outlets=[gold_alias(source)])
    def summary() -> dict:
        """What each job did, each changefeed's watermark and the gold row counts."""
        from ticdc_lake.app.run_results import summarize_run

        context = get_current_context()
        result = summarize_run(run_folder(source, context["dag"].dag_id, context["run_id"]), jobs)
        for line in result.lines():
            print(line)
        alias = context["outlet_events"][gold_alias(source)]
        for changefeed in result.changed_changefeeds:
            watermark = {"watermark": result.watermarks.get(changefeed)}
            alias.add(gold_asset(source, changefeed), extra=watermark | event_extra)
        return result.to_dict()

    return summary()
