"""Airflow UI plugin: the data-quality report, live from the lake the DAGs use.

A FastAPI app under ``/ticdc-lake`` (read only: deltalake and pyarrow, never Spark), shown in the
UI through ``external_views``: Browse → "Data quality", and a "Data quality" tab on each DAG run.

    /ticdc-lake/                       the report (a list of lakes when several configs)
    /ticdc-lake/lakes/{name}           the report of one config (its file stem, or "default")
    /ticdc-lake/dags/{dag}/runs/{run}  the report of the lake that DAG writes, for that run

Who sees what: every route wants Airflow's login (401 without a token or the UI's cookie). A
lake's page shows what its DAGs wrote, so a user sees it only where Airflow's auth manager lets
them read the runs of every DAG that writes the lake (its pipeline and its backfill DAG): GET on
the DAG's runs, the rule Airflow applies to ``GET /api/v2/dags/{dag}/dagRuns/{run}``. Any other
lake is 403 and left out of the list; a run id the DAG does not have is 404 (after the check,
so a refused user learns nothing of its runs).
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from pathlib import Path
from typing import Annotated, Any, ClassVar

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep, requires_authenticated
from airflow.models.dag import DagModel
from airflow.models.dagrun import DagRun
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse
from sqlalchemy import select
from sqlalchemy.orm import Session
from ticdc_lake.orchestration import ConfigNameCollisionError

PREFIX = "/ticdc-lake"
DEFAULT = "default"
Lakes = dict[str, tuple[Path, set[str]]]  # name -> (config file, the DAG ids that write it)


def discovered_lakes() -> Lakes:
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


class LakeAccess:
    """The lakes of one request's user: every route finds its lake here, so none shows a lake
    the auth manager refuses. Reads Airflow's metadata database, never writes it."""

    def __init__(self, lakes: Lakes, user: BaseUser, session: Session):
        self.lakes = lakes
        self.user = user
        self.session = session

    def may_read(self, dag_ids: set[str]) -> bool:
        """Whether the user may read the runs of every one of ``dag_ids`` (none: no)."""
        if not dag_ids:
            return False
        ids = sorted(dag_ids)
        teams = DagModel.get_dag_id_to_team_name_mapping(ids, session=self.session)
        requests = [
            {
                "method": "GET",
                "access_entity": DagAccessEntity.RUN,
                "details": DagDetails(id=dag_id, team_name=teams.get(dag_id)),
            }
            for dag_id in ids
        ]
        return get_auth_manager().batch_is_authorized_dag(requests, user=self.user)

    def readable(self) -> Lakes:
        return {name: lake for name, lake in self.lakes.items() if self.may_read(lake[1])}

    def lake(self, name: str) -> Path:
        """The config of lake ``name``: 404 when there is none, 403 when refused."""
        if name not in self.lakes:
            raise HTTPException(404, f"no pipeline config named {name!r}")
        config, dag_ids = self.lakes[name]
        if not self.may_read(dag_ids):
            raise HTTPException(403, "Forbidden")
        return config

    def lake_of_run(self, dag_id: str, run_id: str) -> Path:
        """The config of the lake ``dag_id`` writes: 404 when it writes none, 403 when refused,
        404 when the DAG has no run ``run_id``."""
        owner = next((lake for lake in self.lakes.values() if dag_id in lake[1]), None)
        if owner is None:
            raise HTTPException(404, f"DAG {dag_id!r} does not run a ticdc-lake pipeline")
        config, dag_ids = owner
        if not self.may_read(dag_ids):
            raise HTTPException(403, "Forbidden")
        found = self.session.scalar(
            select(DagRun.id).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id)
        )
        if found is None:
            raise HTTPException(404, f"DAG {dag_id!r} has no run {run_id!r}")
        return config


def lake_access(request: Request, user: GetUserDep, session: SessionDep) -> LakeAccess:
    """The request's LakeAccess, over the lakes its app finds now (app.state.lakes)."""
    return LakeAccess(request.app.state.lakes(), user, session)


Access = Annotated[LakeAccess, Depends(lake_access)]


def quality_app(lakes: Callable[[], Lakes] = discovered_lakes):
    """The app; ``lakes`` finds the configs on each request (a new config needs no restart)."""
    app = FastAPI(title="TiCDC lake data quality", dependencies=[Depends(requires_authenticated())])
    app.state.lakes = lakes

    @app.exception_handler(ConfigNameCollisionError)
    def configs_collide(request: Request, error: ConfigNameCollisionError) -> HTMLResponse:
        """Configs the DAGs refuse to schedule (their DAG files fail to import): say why, as
        the import errors do, rather than list some of them."""
        return HTMLResponse(_message(f"The pipeline configs cannot be scheduled: {error}"), 500)

    @app.get("/", response_class=HTMLResponse)
    def index(access: Access) -> str:
        readable = access.readable()
        if access.lakes and not readable:
            raise HTTPException(403, "Forbidden")
        if len(access.lakes) == 1:
            ((config, _),) = readable.values()
            return lake_page(config)
        links = "".join(
            f'<li><a href="{PREFIX}/lakes/{escape(name)}">{escape(name)}</a> '
            f"({escape(str(config))})</li>"
            for name, (config, _) in sorted(readable.items())
        )
        return _message("Lakes:") + f"<ul>{links or '<li>no pipeline config</li>'}</ul>"

    @app.get("/lakes/{name}", response_class=HTMLResponse)
    def one_lake(name: str, access: Access) -> str:
        return lake_page(access.lake(name))

    @app.get("/dags/{dag_id}/runs/{run_id}", response_class=HTMLResponse)
    def dag_run(dag_id: str, run_id: str, access: Access) -> str:
        config = access.lake_of_run(dag_id, run_id)
        return lake_page(config, f"DAG {dag_id}, run {run_id}: the lake as it is now")

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
