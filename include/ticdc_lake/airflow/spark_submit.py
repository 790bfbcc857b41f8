"""The operator every Spark task of the DAGs is: the Spark provider's SparkSubmitOperator, except
for where the jobs go when the ``spark_default`` connection is not there.

    SparkJobOperator(application=..., conn_id="spark_default", ...)   # SparkSubmitOperator's args

The provider's hook sends a job whose connection it cannot find to YARN (``--master yarn``), logging
it at INFO: on a fresh Airflow every job failed there and was retried with backoff, with nothing
saying that the connection was missing. The project's default is ``local[*]`` (DESIGN.md,
docs/operations.md): a connection that is not defined anywhere means ``local[*]``, with a warning in
the task's log naming the connection and the line that points it elsewhere. A connection given in
``AIRFLOW_CONN_<ID>`` that Airflow cannot read (an unescaped ``spark://local[*]`` URI is the usual
one) is not taken for a missing one: the task fails at once, without retries, saying so. Everything
else, a connection found included, is the provider's own resolution.

Imported by the DAG files at parse time: Airflow and the provider only.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Connection
from airflow.sdk.exceptions import AirflowFailException, AirflowNotFoundException

SPARK_CONNECTION = "spark_default"
DEFAULT_MASTER = "local[*]"

log = logging.getLogger(__name__)


def connection_variable(conn_id: str) -> str:
    """The environment variable that defines a connection: ``AIRFLOW_CONN_SPARK_DEFAULT``."""
    return f"AIRFLOW_CONN_{conn_id.upper()}"


def connection_line(conn_id: str, master: str) -> str:
    """The one line that defines the connection with that master (JSON: nothing to escape)."""
    value = json.dumps({"conn_type": "spark", "host": master})
    return f"{connection_variable(conn_id)}='{value}'"


class UnreadableConnectionError(ValueError):
    """The connection's environment variable is set, but Airflow could not read it."""


class SparkJobHook(SparkSubmitHook):
    """SparkSubmitHook with ``local[*]`` for a connection that is not defined anywhere."""

    @classmethod
    def get_connection(cls, conn_id: str) -> Any:
        try:
            return super().get_connection(conn_id)
        except AirflowNotFoundException:
            variable = connection_variable(conn_id)
            if os.environ.get(variable, "").strip():
                raise UnreadableConnectionError(
                    f"{variable} is set, but Airflow cannot read the connection {conn_id} from "
                    f"it (a URI must be escaped: spark://local%5B%2A%5D, not spark://local[*]); "
                    f"the JSON form needs no escaping: "
                    f"{connection_line(conn_id, 'spark://HOST:7077')}, or "
                    f"{connection_line(conn_id, DEFAULT_MASTER)}"
                ) from None
            log.warning(
                "The Airflow connection %s is not defined: running the job on %s, the default. "
                "To send the jobs to a cluster, define it, e.g. %s",
                conn_id,
                DEFAULT_MASTER,
                connection_line(conn_id, "spark://HOST:7077"),
            )
            return Connection(conn_id=conn_id, conn_type="spark", host=DEFAULT_MASTER)


class SparkJobOperator(SparkSubmitOperator):
    """SparkSubmitOperator whose hook is a SparkJobHook; an unreadable connection fails the
    task at once (retrying cannot make it readable)."""

    def execute(self, context: Any) -> None:
        if self._hook is None:
            try:
                self._hook = self._get_hook()
            except UnreadableConnectionError as exc:
                raise AirflowFailException(str(exc)) from None
        return super().execute(context)

    def _get_hook(self) -> SparkJobHook:
        # The provider's SparkSubmitOperator._get_hook, with this hook class (a test checks
        # that every parameter of the provider's hook is passed, so an upgrade adding one fails
        # it rather than dropping the setting).
        return SparkJobHook(
            conf=self.conf,
            conn_id=self._conn_id,
            files=self.files,
            py_files=self.py_files,
            archives=self._archives,
            driver_class_path=self.driver_class_path,
            jars=self.jars,
            java_class=self._java_class,
            packages=self.packages,
            exclude_packages=self.exclude_packages,
            repositories=self._repositories,
            total_executor_cores=self._total_executor_cores,
            executor_cores=self._executor_cores,
            executor_memory=self._executor_memory,
            driver_memory=self._driver_memory,
            keytab=self.keytab,
            principal=self.principal,
            proxy_user=self.proxy_user,
            name=self.name,
            num_executors=self._num_executors,
            status_poll_interval=self._status_poll_interval,
            application_args=self.application_args,
            env_vars=self.env_vars,
            verbose=self._verbose,
            spark_binary=self._spark_binary,
            properties_file=self.properties_file,
            yarn_queue=self._yarn_queue,
            deploy_mode=self._deploy_mode,
            use_krb5ccache=self._use_krb5ccache,
            post_submit_commands=self.post_submit_commands,
            track_driver_via_k8s_api=self._track_driver_via_k8s_api,
            yarn_track_via_rm_api=self._yarn_track_via_rm_api,
            yarn_rm_auth=self._yarn_rm_auth,
        )
