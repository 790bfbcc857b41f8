"""The tests' PostgreSQL server (tests/postgres_harness.py): listening on 127.0.0.1 only, every
login by password, a database per caller with a user of its own, and stopped with every backend
it started."""

from __future__ import annotations

import os
from contextlib import closing

import psycopg2
import pytest
from ticdc_lake.airflow.airflow_local import session_processes

from tests.postgres_harness import start_postgres
from tests.runtime.test_spark import _is_loopback, listening, refused_from_outside

pytestmark = pytest.mark.postgres  # one test starts a server of its own


def test_a_database_of_its_own_by_password_on_loopback_only(postgres):
    url = postgres.database("harness_check", password="p@ss:w/rd %?#")
    assert url.startswith("postgresql+psycopg2://harness_check:p%40ss%3Aw%2Frd%20%25%3F%23@")
    db = postgres.connect("harness_check", "harness_check", "p@ss:w/rd %?#")
    with closing(db), db, db.cursor() as cursor:
        cursor.execute("CREATE TABLE t (x int)")  # its own database: it may create there
        cursor.execute("SELECT current_user, current_database()")
        assert cursor.fetchone() == ("harness_check", "harness_check")
    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        postgres.connect("harness_check", "harness_check", "wrong")
    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        postgres.connect(user="postgres", password="wrong")  # the superuser too

    found = listening(postgres.process.pid)
    assert found and all(_is_loopback(address) for address, _ in found), found
    assert {port for _, port in found} == {postgres.port}
    assert refused_from_outside(postgres.port)
    if os.geteuid() == 0:  # Postgres refuses root: it runs as a user of its own
        assert postgres.data.stat().st_uid == postgres.user.pw_uid != 0


def test_stopping_ends_the_server_and_every_backend_and_removes_its_folder():
    with start_postgres() as server:
        connection = server.connect()  # a backend of its own
        sid, folder = server.process.pid, server.folder
    connection.close()
    assert not folder.exists()
    assert session_processes(sid) == []
