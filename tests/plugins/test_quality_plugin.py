"""The data-quality plugin inside a real Airflow (tests/airflow_harness.py): its app answers
only a logged-in user, shows the lake of the DAGs' config, and its views are registered."""

from __future__ import annotations

import pytest
from ticdc_lake.config import load_config
from ticdc_lake.quality.lakeview import lake_view

pytestmark = pytest.mark.slow

PAGES = ("/ticdc-lake/", "/ticdc-lake/lakes/default", "/ticdc-lake/dags/ticdc_lake/runs/any")


def test_the_plugin_wants_a_login_and_shows_the_dags_lake(local_airflow, airflow_sample):
    anonymous = local_airflow.client(None)
    for page in PAGES:
        status, _ = anonymous.request("GET", page)
        assert status == 401, page

    viewer = local_airflow.client("viewer")
    view = lake_view(load_config(airflow_sample / "pipeline.yaml"))
    for page in PAGES:
        status, html = viewer.request("GET", page)
        assert status == 200, (page, html)
        assert "<h2>Changefeeds</h2>" in html and "<h2>Gold tables</h2>" in html
        for feed in view.changefeeds:
            assert f"<td>{feed.name}</td>" in html
            assert str(feed.watermark or 0) in html
        for table in view.gold:
            assert table.table in html
    status, _ = viewer.request("GET", "/ticdc-lake/dags/not_ours/runs/any")
    assert status == 404


def test_the_plugin_registers_its_views(local_airflow):
    plugins = local_airflow.client("viewer").get("/api/v2/plugins")["plugins"]
    ours = next(plugin for plugin in plugins if plugin["name"] == "ticdc_lake_quality")
    views = {view["destination"]: view for view in ours["external_views"]}
    assert views["nav"]["category"] == "browse" and views["nav"]["href"] == "/ticdc-lake/"
    assert views["dag_run"]["href"] == "/ticdc-lake/dags/{DAG_ID}/runs/{RUN_ID}"
