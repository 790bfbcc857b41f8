"""Airflow UI plugin: the data-quality report, live from the lake the DAGs use.

A FastAPI app under ``/ticdc-lake`` (read only: deltalake and pyarrow, never Spark), every route
behind Airflow's login (401 without a token or the UI's cookie), shown in the UI through
``external_views``: Browse → "Data quality", and a "Data quality" tab on each DAG run.

    /ticdc-lake/                       the report (a list of lakes when several configs)
    /ticdc-lake/lakes/{name}           the report of one config (its file stem, or "default")
    /ticdc-lake/dags/{dag}/runs/{run}  the report of the lake that DAG writes, for that run
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from pathlib import Path
from typing import Any, ClassVar

from airflow.api_fastapi.core_api.security import requires_authenticated
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse
from ticdc_lake.orchestration import ConfigNameCollisionError

PREFIX = "/ticdc-lake"
DEFAULT = "default"


def discovered_lakes() -> dict[str, tuple[Path, set[str]]]:
    """Lake name → (its config file, the DAG ids that run it): the configs the DAGs use
    (ConfigNameCollisionError when two of them would share DAG ids)."""
    from ticdc_lake.orchestration import discover_configs

    return {
        source.suffix or DEFAULT: (source.config, {source.pipeline_dag_id, source.backfill_dag_id})
        for source in discover_configs()
    }


def lake_page(config_path: Path, heading: str = "") -> str:
    """The report of the lake ``config_path`` names, read now."""
    from ticdc_lake.config import load_config
    from ticdc_lake.errors import ConfigError
    from ticdc_lake.quality.lakeview import lake_view
    from ticdc_lake.quality.report import render_report

    if not config_path.is_file():
        return _message(f"No pipeline config at {config_path} yet (the demo writes it first run).")
    try:
        config = load_config(config_path)
    except ConfigError as error:
        return _message(f"The pipeline config cannot be read: {error}")
    page = render_report(lake_view(config))
    if heading:
        page = page.replace("<body>\n", f'<body>\n<div class="meta">{escape(heading)}</div>\n', 1)
    return page


def _message(text: str) -> str:
    return f'<!DOCTYPE html><html lang="en"><meta charset="utf-8"><body><p>{escape(text)}</p>'


def quality_app(lakes: Callable[[], dict[str, tuple[Path, set[str]]]] = discovered_lakes):
    """The app; ``lakes`` finds the configs on each request (a new config needs no restart)."""
    app = FastAPI(title="TiCDC lake data quality", dependencies=[Depends(requires_authenticated())])

    @app.exception_handler(ConfigNameCollisionError)
    def configs_collide(request: Request, error: ConfigNameCollisionError) -> HTMLResponse:
        """Configs the DAGs refuse to schedule (their DAG files fail to import): say why, as
        the import errors do, rather than list some of them."""
        return HTMLResponse(_message(f"The pipeline configs cannot be scheduled: {error}"), 500)

    @app.get("/", response_class=HTMLResponse)
    def index() -> str:
        found = lakes()
        if len(found) == 1:
            ((config, _),) = found.values()
            return lake_page(config)
        links = "".join(
            f'<li><a href="{PREFIX}/lakes/{escape(name)}">{escape(name)}</a> '
            f"({escape(str(config))})</li>"
            for name, (config, _) in sorted(found.items())
        )
        return _message("Lakes:") + f"<ul>{links or '<li>no pipeline config</li>'}</ul>"

    @app.get("/lakes/{name}", response_class=HTMLResponse)
    def one_lake(name: str) -> str:
        found = lakes()
        if name not in found:
            raise HTTPException(404, f"no pipeline config named {name!r}")
        return lake_page(found[name][0])

    @app.get("/dags/{dag_id}/runs/{run_id}", response_class=HTMLResponse)
    def dag_run(dag_id: str, run_id: str) -> str:
        for config, dag_ids in lakes().values():
            if dag_id in dag_ids:
                return lake_page(config, f"DAG {dag_id}, run {run_id}: the lake as it is now")
        raise HTTPException(404, f"DAG {dag_id!r} does not run a ticdc-lake pipeline")

    return app


class TicdcLakeQualityPlugin(AirflowPlugin):
    name = "ticdc_lake_quality"
    fastapi_apps: ClassVar[list[dict[str, Any]]] = [
        {"app": quality_app(), "url_prefix": PREFIX, "name": "TiCDC lake quality"}
    ]
    external_views: ClassVar[list[dict[str, Any]]] = [
        {
            "name": "Data quality",
            "href": f"{PREFIX}/",
            "url_route": "ticdc-lake-quality",
            "destination": "nav",
            "category": "browse",
        },
        {
            "name": "Data quality",
            "href": f"{PREFIX}/dags/{{DAG_ID}}/runs/{{RUN_ID}}",
            "url_route": "ticdc-lake-run-quality",
            "destination": "dag_run",
        },
    ]
