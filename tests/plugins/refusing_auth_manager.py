"""An auth manager that refuses some users some DAGs, for the plugin's tests: Airflow's simple
auth manager (roles viewer, user, op, admin, for every DAG alike), except that a user named in
``TICDC_TEST_REFUSED_DAGS`` (``user:dag_id,...``, read on each check) may do nothing with that
DAG, as a per-DAG rule of a production auth manager would refuse it.

    AIRFLOW__CORE__AUTH_MANAGER=tests.plugins.refusing_auth_manager.RefusingAuthManager
"""

from __future__ import annotations

import os

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

REFUSED_ENV = "TICDC_TEST_REFUSED_DAGS"


def refused() -> set[tuple[str, str]]:
    pairs = (item.split(":", 1) for item in os.environ.get(REFUSED_ENV, "").split(",") if item)
    return {(user, dag_id) for user, dag_id in pairs}


class RefusingAuthManager(SimpleAuthManager):
    def is_authorized_dag(self, *, method, user, access_entity=None, details=None) -> bool:
        if details is not None and (user.get_name(), details.id) in refused():
            return False
        return super().is_authorized_dag(
            method=method, user=user, access_entity=access_entity, details=details
        )
