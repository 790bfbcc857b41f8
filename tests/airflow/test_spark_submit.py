"""The DAGs' Spark operator (ticdc_lake.airflow.spark_submit): where a job goes with the
``spark_default`` connection missing, defined, or set but unreadable, through the provider's own
hook resolution (no Airflow running, no JVM: the hook is built and its spark-submit command
read). The same in a fresh Airflow home with `airflow dags test` is
tests/airflow/test_spark_connection.py."""

from __future__ import annotations

import inspect
import json
import logging

import pytest
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators import spark_submit as provider
from airflow.sdk.exceptions import AirflowFailException
from ticdc_lake.airflow import spark_submit
from ticdc_lake.airflow.spark_submit import SparkJobOperator

VARIABLE = "AIRFLOW_CONN_SPARK_DEFAULT"


def operator(**settings) -> SparkJobOperator:
    return SparkJobOperator(task_id="land", application="job.py", spark_binary="spark-submit",
                            **settings)  # fmt: skip


def master(command: list[str]) -> str:
    return command[command.index("--master") + 1]


def test_a_missing_connection_runs_the_job_on_local_and_says_so(monkeypatch, caplog):
    """The provider's hook alone sends it to YARN, logging that at INFO only."""
    monkeypatch.delenv(VARIABLE, raising=False)
    with caplog.at_level(logging.INFO):
        hook = operator()._get_hook()
    assert master(hook._build_spark_submit_command("job.py")) == "local[*]"
    assert not hook._is_yarn
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert "connection spark_default is not defined: running the job on local[*]" in warning
    assert """AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "spark://""" in warning
    assert "yarn" not in caplog.text


def test_a_defined_connection_is_resolved_by_the_provider(monkeypatch, caplog):
    url = "spark://spark-master:7077"
    monkeypatch.setenv(VARIABLE, json.dumps({"conn_type": "spark", "host": url}))
    with caplog.at_level(logging.WARNING):
        hook = operator(deploy_mode="client")._get_hook()
    assert master(hook._build_spark_submit_command("job.py")) == url
    assert caplog.records == []


@pytest.mark.parametrize("value", ["spark://local[*]", "{not json"])
def test_a_connection_set_but_unreadable_fails_the_task_at_once(monkeypatch, value):
    """Not taken for a missing one (local[*]) nor left to the provider (YARN): the task fails
    without retries, naming the variable and the line that works."""
    monkeypatch.setenv(VARIABLE, value)
    task = operator()
    with pytest.raises(AirflowFailException) as failed:
        task.execute({})
    message = str(failed.value)
    assert message.startswith("AIRFLOW_CONN_SPARK_DEFAULT is set, but Airflow cannot read")
    assert """AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[*]"}'""" in message


def test_the_hook_gets_every_setting_the_providers_operator_gives_its_own(monkeypatch):
    """SparkJobOperator builds its hook as the provider's operator does, only of another class:
    a provider upgrade adding a hook parameter fails here instead of dropping the setting."""
    task = operator(conf={"a": "b"}, executor_memory="2g", verbose=True, env_vars={"X": "1"})
    monkeypatch.setattr(spark_submit, "SparkJobHook", lambda **given: given)
    monkeypatch.setattr(provider, "SparkSubmitHook", lambda **given: given)
    ours, theirs = task._get_hook(), provider.SparkSubmitOperator._get_hook(task)
    assert ours == theirs
    parameters = inspect.signature(SparkSubmitHook.__init__).parameters
    assert set(ours) == set(parameters) - {"self"}
