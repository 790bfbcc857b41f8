"""The plugin's FastAPI app in-process, behind Airflow's real auth: the simple auth manager,
tokens it signs itself (the api-server's /auth/token does the same), over a real small lake."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.quality.report_lake import BAD_KEY, fill_lake, write_config

REPO = Path(__file__).resolve().parents[2]


def load_plugin():
    spec = importlib.util.spec_from_file_location(
        "ticdc_lake_quality", REPO / "plugins" / "ticdc_lake_quality.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def airflow_db(tmp_path_factory):
    """Airflow's metadata DB (the auth manager looks revoked tokens up there): a new SQLite,
    created from Airflow's models; the previous ORM setup is restored afterwards."""
    from airflow import settings
    from airflow.utils import db

    with pytest.MonkeyPatch.context() as env:
        path = tmp_path_factory.mktemp("airflow-db") / "airflow.db"
        env.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{path}")
        settings.dispose_orm(do_log=False)
        settings.configure_vars()
        settings.configure_orm()
        db.initdb()
        yield
        settings.dispose_orm(do_log=False)
    settings.configure_vars()
    settings.configure_orm()


@pytest.fixture
def airflow_auth(tmp_path, monkeypatch, airflow_db):
    """Airflow's auth manager, as the api-server sets it up, and a token it issued."""
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "a-secret-for-this-test-only-" * 3)
    monkeypatch.setenv("AIRFLOW__CORE__AUTH_MANAGER", "airflow.api_fastapi.auth.managers."
                       "simple.simple_auth_manager.SimpleAuthManager")  # fmt: skip
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE", str(tmp_path / "pw"))
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    manager = init_auth_manager()
    return manager.generate_jwt(SimpleAuthManagerUser(username="viewer", role="viewer"))


@pytest.fixture
def client(tmp_path, airflow_auth):
    config = write_config(tmp_path)
    fill_lake(config)
    lakes = {"default": (config.source, {"ticdc_lake", "ticdc_lake_backfill"})}
    return TestClient(load_plugin().quality_app(lambda: lakes))


@pytest.mark.parametrize("path", ["/", "/lakes/default", "/dags/ticdc_lake/runs/r1"])
def test_every_route_wants_a_login(client, path):
    assert client.get(path).status_code == 401
    bad = client.get(path, headers={"Authorization": "Bearer not-a-token"})
    assert bad.status_code in (401, 403)


def test_the_page_shows_the_lake_to_a_logged_in_user(client, airflow_auth):
    headers = {"Authorization": f"Bearer {airflow_auth}"}
    page = client.get("/", headers=headers)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "Failing stages: silver" in page.text and BAD_KEY in page.text
    assert "shop.orders" in page.text and "moving" in page.text
    run = client.get("/dags/ticdc_lake/runs/manual__1", headers=headers)
    assert run.status_code == 200 and "DAG ticdc_lake, run manual__1" in run.text
    assert client.get("/dags/other/runs/x", headers=headers).status_code == 404
    assert client.get("/lakes/nope", headers=headers).status_code == 404


def test_the_ui_cookie_logs_in_too(client, airflow_auth):
    client.cookies.set("_token", airflow_auth)
    assert client.get("/lakes/default").status_code == 200


def test_configs_sharing_a_dag_id_are_reported_not_half_listed(tmp_path, monkeypatch, airflow_auth):
    """The DAG files fail to import on them; the page says why instead of listing some."""
    for name in ("prod.yaml", "prod.yml", "orders.yaml"):
        (tmp_path / name).touch()
    monkeypatch.setenv("TICDC_LAKE_CONFIGS", str(tmp_path))
    client = TestClient(load_plugin().quality_app())  # the configs the DAGs find
    headers = {"Authorization": f"Bearer {airflow_auth}"}
    for path in ("/", "/lakes/prod", "/dags/ticdc_lake__prod/runs/r1"):
        page = client.get(path, headers=headers)
        assert page.status_code == 500, path
        assert "The pipeline configs cannot be scheduled: " in page.text
        assert "&#x27;prod.yaml&#x27; and &#x27;prod.yml&#x27; both give" in page.text
