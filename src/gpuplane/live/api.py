"""The REST API (FastAPI): jobs, why, logs, queues, nodes, pools, events, services, metrics.

Every request carries ``Authorization: Bearer <token>``; a team token sees and changes only that team's
jobs and services, the admin token everything. Bad requests get 4xx with the field and the reason, and
nothing is created by a request that is refused.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from gpuplane.live.auth import Principal, TokenTable
from gpuplane.live.control import BatchRefused, ControlPlane, Refusal, SubmitError
from gpuplane.live.limits import (
    MAX_BATCH_JOBS,
    MAX_ENTRYPOINT_ARGS,
    MAX_ENV_VARS,
    MAX_INT64,
    MAX_JSON_DEPTH,
    Arg,
    BodyLimit,
    EnvName,
    EnvValue,
    PlainText,
    Seconds,
    json_depth,
)
from gpuplane.live.metrics import Metrics
from gpuplane.live.plane_access import JobRef, PlaneAccess, job_view
from gpuplane.live.records import JobRecord, JobState
from gpuplane.live.services import ServiceError, ServiceManager
from gpuplane.policy.schema_base import Name

__all__ = ["PlaneAccess", "bearer_token", "check_working_dir", "create_app", "job_view"]


class JobRequest(BaseModel):
    """A job submission. Fields left out take the policy's class and tier defaults; every field is bounded."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: PlainText = Field(min_length=1, max_length=253)
    team: Name | None = None
    klass: Literal["training", "batch"] = Field("training", alias="class")
    entrypoint: list[Arg] = Field(min_length=1, max_length=MAX_ENTRYPOINT_ARGS)
    pods: int = Field(1, ge=1, le=4096)
    gpus_per_pod: int = Field(1, ge=0, le=64)
    mig_profile: PlainText | None = Field(None, max_length=32)
    gpu_milli: int | None = Field(None, ge=1, le=999)
    priority: Name | None = None
    preemptible: bool | None = None
    checkpoint_interval_s: Seconds | None = None
    estimated_duration_s: Seconds | None = None
    pools: list[Name] | None = Field(None, max_length=64)
    env: dict[EnvName, EnvValue] = Field(default_factory=dict, max_length=MAX_ENV_VARS)
    working_dir: PlainText | None = Field(None, max_length=4096)
    idempotency_key: PlainText | None = Field(None, min_length=1, max_length=128)


class BatchRequest(BaseModel):
    """A bulk submission: up to ``MAX_BATCH_JOBS`` job submissions, accepted all together or not at all."""

    model_config = ConfigDict(extra="forbid")
    jobs: list[JobRequest] = Field(min_length=1, max_length=MAX_BATCH_JOBS)


class CanaryRequest(BaseModel):
    """A new revision of a service to roll out as a canary: its handler and options."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    handler: PlainText = Field(min_length=3, max_length=256)
    options: dict[str, Any] = Field(default_factory=dict)


class ScaleRequest(BaseModel):
    """Pin a service's replica count (``replicas``), or hand it back to the autoscaler (null)."""

    model_config = ConfigDict(extra="forbid")
    replicas: int | None = Field(None, ge=0, le=1000)


def _or_http(call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run a service operation; a ServiceError becomes its HTTP status with the field and the problem."""
    try:
        return call()
    except ServiceError as exc:
        raise HTTPException(exc.status, {"field": exc.field, "problem": str(exc)}) from exc


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None when the header carries none.

    Only ASCII spaces and tabs separate or surround it (RFC 7235); anything else, such as U+0085 or other
    Unicode whitespace that ``str.strip`` would remove, stays part of the token and so matches no one.
    """
    if authorization is None:
        return None
    scheme, _, rest = authorization.strip(" \t").partition(" ")
    token = rest.strip(" \t")
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def _identify(request: Request, authorization: str | None) -> Principal:
    token = bearer_token(authorization)
    if token is None:
        raise HTTPException(401, "missing token: send 'Authorization: Bearer <team or admin token>'")
    who: Principal | None = request.app.state.tokens.identify(token)
    if who is None:
        raise HTTPException(401, "unknown token")
    return who


def _principal(request: Request, authorization: Annotated[str | None, Header()] = None) -> Principal:
    who = _identify(request, authorization)
    if who.metrics_only:
        raise HTTPException(403, "the metrics token reads /metrics only")
    return who


def _scraper(request: Request, authorization: Annotated[str | None, Header()] = None) -> Principal:
    return _identify(request, authorization)


Who = Annotated[Principal, Depends(_principal)]
Scraper = Annotated[Principal, Depends(_scraper)]
"""Anyone with a token may read /metrics: the admin and the metrics token every series, a team its own."""


def shallow(value: Any, field: str) -> None:
    """Refuse JSON nested deeper than the store and the logs can take (422 naming ``field``)."""
    if json_depth(value) > MAX_JSON_DEPTH:
        raise HTTPException(422, {"field": field, "problem": f"nested more than {MAX_JSON_DEPTH} levels"})


def check_working_dir(path: str, private_root: Path | None) -> None:
    """Refuse (422) a working directory that is relative or inside the plane's private data directory, where
    other teams' job directories, logs, checkpoints and the database live."""
    if not os.path.isabs(path):
        raise HTTPException(
            422, {"field": "working_dir", "problem": f"'{path}' is relative. Fix: give an absolute directory"}
        )
    if private_root is not None:
        root = os.path.realpath(private_root)
        real = os.path.realpath(path)
        if os.path.commonpath([root, real]) == root:
            raise HTTPException(
                422,
                {
                    "field": "working_dir",
                    "problem": "inside the control plane's data directory (other jobs' files and the database). "
                    "Fix: run the job in a directory of your own",
                },
            )


def create_app(
    control: ControlPlane,
    tokens: TokenTable,
    metrics: Metrics,
    services: ServiceManager,
    private_root: Path | None = None,
) -> FastAPI:
    """The API over one control plane, which it reaches only through ``PlaneAccess`` (queries and commands)."""
    plane = PlaneAccess(control, services)
    app = FastAPI(title="gpuplane", version="0.1.0", description="GPU scheduling and autoscaling control plane")
    app.state.tokens = tokens
    app.add_middleware(BodyLimit)
    _add_error_format(app)
    _add_job_routes(app, plane, private_root)
    _add_cluster_routes(app, plane)
    _add_service_routes(app, plane)
    _add_metrics_route(app, plane, metrics)
    return app


def _add_error_format(app: FastAPI) -> None:
    """Request validation errors, and the refused jobs of a batch, as ``{"detail", "errors": [{"field",
    "problem"}]}`` (422; a batch's fields are ``jobs.INDEX.FIELD``, with the job's ``name``)."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"field": ".".join(str(p) for p in e["loc"] if p != "body"), "problem": e["msg"]} for e in exc.errors()
        ]
        return JSONResponse({"detail": "invalid request", "errors": errors}, status_code=422)

    @app.exception_handler(BatchRefused)
    async def _refused(_request: Request, exc: BatchRefused) -> JSONResponse:
        errors = [{"field": f"jobs.{r.index}.{r.field}", "problem": r.problem, "name": r.name} for r in exc.refusals]
        detail = f"{len(exc.refusals)} of {exc.size} jobs refused, none submitted"
        return JSONResponse({"detail": detail, "errors": errors}, status_code=422)


def _own_job(plane: PlaneAccess, job_id: str, who: Principal) -> JobRef:
    job = plane.job_ref(job_id)
    if job is None or not who.may_access(job.team):
        raise HTTPException(404, f"no job '{job_id}' visible to this token")
    return job


def _team_of(plane: PlaneAccess, requested: str | None, who: Principal) -> str:
    if who.is_admin:
        if requested is None:
            raise HTTPException(422, {"field": "team", "problem": "the admin token must name the team"})
        if not plane.knows_team(requested):
            raise HTTPException(422, {"field": "team", "problem": f"unknown team '{requested}'"})
        return requested
    assert who.team is not None
    if requested is not None and requested != who.team:
        raise HTTPException(403, f"this token belongs to team '{who.team}', not '{requested}'")
    return who.team


def _job_record(plane: PlaneAccess, req: JobRequest, team: str) -> JobRecord:
    return JobRecord(
        id=plane.new_job_id(),
        team=team,
        name=req.name,
        klass=req.klass,
        entrypoint=req.entrypoint,
        pods=req.pods,
        gpus_per_pod=req.gpus_per_pod,
        submit_time=plane.now(),
        priority=req.priority,
        mig_profile=req.mig_profile,
        gpu_milli=req.gpu_milli,
        env=req.env,
        preemptible=req.preemptible,
        checkpoint_interval_s=req.checkpoint_interval_s,
        estimated_duration_s=req.estimated_duration_s,
        pools=req.pools,
        working_dir=req.working_dir,
        idempotency_key=req.idempotency_key,
    )


def _batch_records(plane: PlaneAccess, req: BatchRequest, who: Principal, private_root: Path | None) -> list[JobRecord]:
    """The batch's jobs as records, each with its team and a checked working directory; 403 naming the first job
    of another team, ``BatchRefused`` (422) listing every job whose team or directory is refused."""
    records: list[JobRecord] = []
    refusals: list[Refusal] = []
    for index, job in enumerate(req.jobs):
        try:
            team = _team_of(plane, job.team, who)
            if job.working_dir is not None:
                check_working_dir(job.working_dir, private_root)
        except HTTPException as exc:
            if exc.status_code != 422 or not isinstance(exc.detail, dict):
                raise HTTPException(exc.status_code, f"jobs.{index}: {exc.detail}") from exc
            refusals.append(Refusal(index, job.name, exc.detail["field"], exc.detail["problem"]))
            continue
        records.append(_job_record(plane, job, team))
    if refusals:
        raise BatchRefused(refusals, len(req.jobs))
    return records


def _add_job_routes(app: FastAPI, plane: PlaneAccess, private_root: Path | None) -> None:
    """Health, submit (one job, or a batch), list, get, cancel, why, logs."""

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return plane.health()

    @app.post("/v1/jobs", status_code=201)
    def submit(req: JobRequest, who: Who) -> JSONResponse:
        team = _team_of(plane, req.team, who)
        if req.working_dir is not None:
            check_working_dir(req.working_dir, private_root)
        try:
            view, created = plane.submit(_job_record(plane, req, team))
        except SubmitError as exc:
            raise HTTPException(422, {"field": exc.field, "problem": str(exc)}) from exc
        return JSONResponse(view, status_code=201 if created else 200)

    @app.post("/v1/jobs/batch", status_code=201)
    def submit_batch(req: BatchRequest, who: Who) -> JSONResponse:
        accepted = plane.submit_many(_batch_records(plane, req, who, private_root))
        created = sum(1 for _, new in accepted if new)
        body = {"created": created, "jobs": [{"created": new, "job": view} for view, new in accepted]}
        return JSONResponse(body, status_code=201 if created else 200)

    @app.get("/v1/jobs")
    def list_jobs(
        who: Who,
        state: JobState | None = None,
        team: str | None = None,
        limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
    ) -> list[dict[str, Any]]:
        return plane.jobs(who.may_access, state, team, limit)

    @app.get("/v1/jobs/{job_id}")
    def get_job(job_id: str, who: Who) -> dict[str, Any]:
        _own_job(plane, job_id, who)
        return plane.job(job_id)

    @app.delete("/v1/jobs/{job_id}", status_code=202)
    def cancel_job(job_id: str, who: Who) -> dict[str, Any]:
        _own_job(plane, job_id, who)
        return plane.cancel(job_id)

    @app.get("/v1/jobs/{job_id}/why")
    def why(job_id: str, who: Who) -> dict[str, Any]:
        _own_job(plane, job_id, who)
        return plane.why(job_id)

    @app.get("/v1/jobs/{job_id}/logs")
    def logs(
        job_id: str,
        who: Who,
        rank: Annotated[int, Query(ge=0, le=4095)] = 0,
        offset: Annotated[int, Query(ge=0, le=MAX_INT64)] = 0,
    ) -> PlainTextResponse:
        job = _own_job(plane, job_id, who)
        if rank >= job.pods:
            raise HTTPException(422, {"field": "rank", "problem": f"the job has ranks 0..{job.pods - 1}"})
        return PlainTextResponse(plane.log(job_id, rank, offset).decode(errors="replace"))


def _add_cluster_routes(app: FastAPI, plane: PlaneAccess) -> None:
    """Queues, nodes, pools, events, the shadow's comparison."""

    @app.get("/v1/queues")
    def queues(who: Who) -> list[dict[str, Any]]:
        return [q for q in plane.queues() if who.may_access(q["queue"])]

    @app.get("/v1/nodes")
    def nodes(who: Who) -> list[dict[str, Any]]:
        return plane.nodes()

    @app.get("/v1/pools")
    def pools(who: Who) -> list[dict[str, Any]]:
        return plane.pools()

    @app.get("/v1/events")
    def events(
        who: Who,
        after: Annotated[int, Query(ge=0, le=MAX_INT64)] = 0,
        limit: Annotated[int, Query(ge=1, le=5000)] = 200,
        subject: Annotated[PlainText | None, Query(max_length=128)] = None,
    ) -> list[dict[str, Any]]:
        return plane.events(after, limit, None if who.is_admin else who.team, subject)

    @app.get("/v1/shadow")
    def shadow(who: Who) -> dict[str, Any]:
        report = plane.shadow()
        if report is None:
            raise HTTPException(404, "this plane is not a shadow plane (gpuplane serve --shadow)")
        report["teams"] = [t for t in report["teams"] if who.may_access(t["team"])]
        if not who.is_admin:
            report["unmirrored"] = {}
        return report


def _add_service_routes(app: FastAPI, plane: PlaneAccess) -> None:
    """Deploy, list, get, scale, canary, delete, and the inference gateway."""

    def own_service(name: str, who: Principal) -> None:
        team = plane.service_team(name)
        if team is None or not who.may_access(team):
            raise HTTPException(404, f"no service '{name}' visible to this token")

    @app.get("/v1/services")
    def list_services(who: Who) -> list[dict[str, Any]]:
        return [s for s in plane.services() if who.may_access(s["team"])]

    @app.post("/v1/services", status_code=201)
    def deploy(body: dict[str, Any], who: Who) -> dict[str, Any]:
        shallow(body, "body")
        team = None if who.is_admin else who.team
        return _or_http(lambda: plane.deploy(body, team))

    @app.get("/v1/services/{name}")
    def get_service(name: str, who: Who) -> dict[str, Any]:
        own_service(name, who)
        return plane.service(name)

    @app.put("/v1/services/{name}/scale")
    def scale(name: str, req: ScaleRequest, who: Who) -> dict[str, Any]:
        own_service(name, who)
        return plane.pin(name, req.replicas)

    @app.post("/v1/services/{name}/canary", status_code=201)
    def start_canary(name: str, req: CanaryRequest, who: Who) -> dict[str, Any]:
        own_service(name, who)
        shallow(req.options, "options")
        return _or_http(lambda: plane.start_canary(name, req.handler, req.options))

    @app.delete("/v1/services/{name}/canary")
    def abort_canary(name: str, who: Who) -> dict[str, Any]:
        own_service(name, who)
        return _or_http(lambda: plane.abort_canary(name))

    @app.delete("/v1/services/{name}", status_code=202)
    def delete_service(name: str, who: Who) -> dict[str, Any]:
        own_service(name, who)
        return plane.delete_service(name)

    @app.post("/v1/services/{name}/infer")
    async def infer(name: str, request: Request, who: Who) -> Response:
        own_service(name, who)
        body = await request.body()
        status, payload = await plane.gateway.forward(name, body)
        return Response(payload, status_code=status, media_type="application/json")


def _add_metrics_route(app: FastAPI, plane: PlaneAccess, metrics: Metrics) -> None:
    """Prometheus text: every series for the admin and the metrics token, a team's own for a team token."""

    @app.get("/metrics")
    def prometheus(who: Scraper) -> Response:
        if who.may_scrape:
            text = metrics.render()
        else:
            assert who.team is not None
            text = metrics.render_for_team(who.team, plane.services_of(who.team))
        return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8")
