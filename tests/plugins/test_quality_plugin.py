"""The data-quality plugin inside a real Airflow of its own (tests/airflow_harness.py): two lakes,
shop and ledger, each written by a pipeline and a backfill DAG, and an auth manager that refuses
the user ``refused`` the DAG ticdc_lake__shop (tests/plugins/refusing_auth_manager.py). The
api-server serves a lake only to a user who may read its DAGs' runs: 401 without a token, 403 to
``refused`` for shop on every route, 200 to a viewer; a run the DAG does not have is 404, and so
is a path that climbs out of the plugin's. Every process Airflow started is stopped at the end,
pass or fail."""

from __future__ import annotations

import http.client
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from ticdc_lake.config import load_config
from ticdc_lake.quality.lakeview import lake_view

from tests.airflow_harness import REPO, start_airflow
from tests.plugins.refusing_auth_manager import REFUSED_ENV
from tests.plugins.test_quality_app import AUTH_MANAGER
from tests.quality.report_lake import BAD_KEY, fill_lake

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

SHOP = ("ticdc_lake__shop", "ticdc_lake_backfill__shop")
LEDGER = ("ticdc_lake__ledger", "ticdc_lake_backfill__ledger")
RUNS = {SHOP[0]: "run-1", SHOP[1]: "backfill-1", LEDGER[0]: "run-1"}


def write_lakes(folder: Path) -> Path:
    """shop.yaml and ledger.yaml in ``folder``, each with its own filled lake."""
    for name in ("shop", "ledger"):
        path = folder / f"{name}.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "version": 1,
                    "lake": f"lake-{name}",
                    "topics": {"orders": {"protocol": "open-protocol", "partitions": 2}},
                    "changefeeds": {"shop": {"topics": ["orders"]}},
                }
            )
        )
        fill_lake(load_config(path))
    return folder


@pytest.fixture(scope="module")
def plugin_airflow(tmp_path_factory, postgres):
    configs = write_lakes(tmp_path_factory.mktemp("configs"))
    env = {
        "AIRFLOW__CORE__AUTH_MANAGER": AUTH_MANAGER,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,viewer:viewer,refused:viewer",
        REFUSED_ENV: f"refused:{SHOP[0]}",
        "PYTHONPATH": str(REPO),  # the auth manager is the tests'
    }
    with start_airflow(tmp_path_factory.mktemp("airflow-home"), configs=configs,
                       database_url=postgres.database("airflow_quality_plugin"),
                       env=env) as airflow:  # fmt: skip
        admin = airflow.client("admin")
        wait_for_dags(airflow, set(SHOP) | set(LEDGER))
        for dag_id, run_id in RUNS.items():  # the DAGs are paused: the runs stay queued
            status, body = admin.request("POST", f"/api/v2/dags/{dag_id}/dagRuns",
                                         {"logical_date": None, "dag_run_id": run_id})  # fmt: skip
            assert status == 200, body
        yield airflow, configs


def wait_for_dags(airflow, dag_ids: set[str], within: float = 240.0) -> None:
    admin = airflow.client("admin")
    deadline = time.monotonic() + within
    while True:
        listed = {dag["dag_id"] for dag in admin.get("/api/v2/dags?limit=100")["dags"]}
        if dag_ids <= listed:
            return
        assert time.monotonic() < deadline, f"DAGs listed: {sorted(listed)}"
        airflow.check_running()
        time.sleep(2)


def page(client, path: str) -> tuple[int, str]:
    status, body = client.request("GET", path)
    return status, body if isinstance(body, str) else str(body)


def test_a_lake_is_served_only_to_users_who_may_read_its_dags_runs(plugin_airflow):
    airflow, configs = plugin_airflow
    shop_run, backfill_run = f"/dags/{SHOP[0]}/runs/run-1", f"/dags/{SHOP[1]}/runs/backfill-1"
    anonymous = airflow.client(None)
    for path in ("/", "/lakes/shop", shop_run):
        assert page(anonymous, "/ticdc-lake" + path)[0] == 401, path

    viewer, refused = airflow.client("viewer"), airflow.client("refused")
    # The auth manager refuses as the test means: Airflow's own API says so.
    assert viewer.request("GET", f"/api/v2/dags/{SHOP[0]}/dagRuns/run-1")[0] == 200
    assert refused.request("GET", f"/api/v2/dags/{SHOP[0]}/dagRuns/run-1")[0] == 403

    shop = lake_view(load_config(configs / "shop.yaml"))
    for path in ("/lakes/shop", shop_run, backfill_run):
        status, html = page(viewer, "/ticdc-lake" + path)
        assert status == 200, (path, html)
        assert "<h2>Changefeeds</h2>" in html and BAD_KEY in html
        assert all(str(table.watermark or 0) in html for table in shop.gold)
        assert all(table.table in html for table in shop.gold)
    status, html = page(viewer, "/ticdc-lake/")
    assert status == 200 and "lakes/shop" in html and "lakes/ledger" in html
    assert page(viewer, f"/ticdc-lake/dags/{SHOP[0]}/runs/no-such-run")[0] == 404

    for path in ("/lakes/shop", shop_run, backfill_run, f"/dags/{SHOP[0]}/runs/no-such-run"):
        status, html = page(refused, "/ticdc-lake" + path)
        assert status == 403, (path, status)
        assert BAD_KEY not in html and "lake-shop" not in html
    status, html = page(refused, "/ticdc-lake/")
    assert status == 200 and "lakes/ledger" in html
    assert "lakes/shop" not in html and "shop.yaml" not in html
    for path in ("/lakes/ledger", f"/dags/{LEDGER[0]}/runs/run-1"):
        status, html = page(refused, "/ticdc-lake" + path)
        assert status == 200 and BAD_KEY in html, path


@pytest.mark.parametrize(
    "path",
    [
        "/ticdc-lake/lakes/..",
        "/ticdc-lake/lakes/../../../etc/passwd",
        "/ticdc-lake/lakes/..%2F..%2Fetc%2Fpasswd",
        "/ticdc-lake/lakes/%2e%2e",
        f"/ticdc-lake/dags/{SHOP[0]}/runs/../../lakes/shop",
        f"/ticdc-lake/dags/{SHOP[0]}/runs/..%2F..%2F..%2Fetc%2Fpasswd",
    ],
)
def test_a_path_climbing_out_of_the_plugin_is_404(plugin_airflow, path):
    """Sent as written (http.client resolves no dot segment), by a viewer of every lake."""
    airflow, _ = plugin_airflow
    url = urlsplit(airflow.settings.url)
    token = airflow.client("viewer").token
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    try:
        connection.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        response = connection.getresponse()
        body = response.read().decode(errors="replace")
    finally:
        connection.close()
    assert response.status == 404, (path, response.status)
    assert BAD_KEY not in body and "root:" not in body


def test_the_plugin_registers_its_views(plugin_airflow):
    airflow, _ = plugin_airflow
    plugins = airflow.client("viewer").get("/api/v2/plugins")["plugins"]
    ours = next(plugin for plugin in plugins if plugin["name"] == "ticdc_lake_quality")
    views = {view["destination"]: view for view in ours["external_views"]}
    assert views["nav"]["category"] == "browse" and views["nav"]["href"] == "/ticdc-lake/"
    assert views["dag_run"]["href"] == "/ticdc-lake/dags/{DAG_ID}/runs/{RUN_ID}"
