"""The REST planning service.

``create_app()`` builds the FastAPI application; ``shardplan serve`` runs it
under uvicorn. The cost models of every profile that has them load once, at
start-up. Planning and evaluation run on a small thread pool, off the event
loop, so a long search never stalls ``/healthz`` or the other requests; each
planning request has a time budget (see :mod:`shardplan.budget`), and the
sizes one request may ask for are bounded by :class:`~shardplan.api.limits.Limits`.

Every error the service raises itself is a 4xx with the body
``{"detail": [{"loc": [...], "msg": ..., "type": ...}]}``, the same shape as
FastAPI's own request-validation errors, naming the field and the fix.
"""
import asyncio
import math
import re
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from enum import Enum
from typing import Annotated, Any, AsyncIterator, Callable, Sequence

from fastapi import FastAPI, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from .. import __version__
from ..budget import BudgetExceeded, time_budget
from ..cost.estimator import PlanEstimator, load_estimator
from ..cost.profiles import DEFAULT_PROFILE, PROFILES, get_profile, profile_for
from ..domain import SHARDING_TYPES, Plan, Task
from ..errors import InfeasibleError, InputError
from ..formats import plan_from_model, plan_to_dict, task_from_model
from ..schema import PlanModel, TaskModel
from ..search import DEFAULT_SEARCHER, SEARCHERS, get_searcher
from ..validate import validate_plan
from .limits import Limits
from .models import ErrorBody, Health, ProfileInfo, SearcherInfo

QUERY_FIELDS = {"searcher", "seed", "profile", "budget_s", "sharding_types"}
ERRORS: dict[int | str, dict[str, Any]] = {
    413: {"model": ErrorBody, "description": "request body over the service's size limit (--max-body-bytes)"},
    422: {"model": ErrorBody, "description": "invalid, over a limit, infeasible, or over the time budget"},
}

# Enums put the allowed values into the OpenAPI document (and so into clients and schemathesis).
SearcherName = Enum("SearcherName", {name: name for name in sorted(SEARCHERS)}, type=str)
ProfileName = Enum("ProfileName", {name: name for name in PROFILES}, type=str)
ShardingType = Enum("ShardingType", {name: name for name in SHARDING_TYPES}, type=str)


def _loc(field: str) -> list[str | int]:
    """``tables[3].embedding_dim`` -> ``["body", "tables", 3, "embedding_dim"]``."""
    parts: list[str | int] = [int(p) if p.isdigit() else p for p in re.findall(r"[^.\[\]]+", field)]
    origin = "query" if parts and parts[0] in QUERY_FIELDS else "body"
    return [origin, *parts]


def _error(status: int, loc: list[str | int], msg: str, kind: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"detail": [{"loc": loc, "msg": msg, "type": kind}]})


def _json_safe(obj: Any) -> Any:
    """``obj`` with every NaN or infinite float as its text: JSON has no such numbers."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


class BodyLimit:
    """ASGI middleware: a 413 in the service's error shape for a request body over ``max_bytes``.

    Decided from Content-Length when one is sent; otherwise the body is read here
    (up to the limit) and replayed to the app. Starlette's own limiter answers in
    plain text, without the fix, and a body cut off mid-stream reaches FastAPI's
    parser as a 400, so the limit is enforced before either sees the request.
    """

    def __init__(self, app: Callable, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        too_large = _error(413, ["body"], f"the request body is over this service's limit of {self.max_bytes} "
                           "bytes; split the task, or start the service with a higher --max-body-bytes",
                           "body_too_large")
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await too_large(scope, receive, send)
        chunks: list[bytes] = []
        size, message = 0, {"more_body": True}
        while message.get("more_body", False):
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                return await too_large(scope, receive, send)
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self.app(scope, replay, send)


# GPU profiles: price at the host state of a machine whose reference workload runs in this many ms
HostReference = Annotated[float | None, Query(
    gt=0, le=100, description="GPU profiles: price at the host state of a machine whose reference workload runs in "
                              "this many ms (`shardplan profiles --host-reference` times it there); default the "
                              "profile's collection's state")]


def _estimators(profiles: Sequence[str] | None) -> dict[str, PlanEstimator]:
    """The named profiles' estimators (an error if one cannot be loaded), or every one that loads."""
    if profiles is not None:
        return {name: load_estimator(name) for name in profiles}
    out = {}
    for name in PROFILES:
        try:
            out[name] = load_estimator(name)
        except InputError:  # no model and no published figures: the service does without it
            continue
    return out


def create_app(limits: Limits | None = None, profiles: Sequence[str] | None = None) -> FastAPI:
    """The planning service. ``profiles``: which profiles' models to load (default: every
    profile that can be priced: a committed compute model, or for a GPU profile without
    one the published-bandwidth roofline, see :func:`load_estimator`)."""
    limits = limits or Limits()
    get_profile(DEFAULT_PROFILE)  # a SHARDPLAN_PROFILE naming no profile is refused here, not at the first request

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.estimators = _estimators(profiles)
        app.state.executor = ThreadPoolExecutor(max_workers=limits.workers, thread_name_prefix="plan")
        yield
        app.state.executor.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="shardplan", version=__version__, lifespan=lifespan,
                  description="Embedding-table sharding plans for DLRM training, priced by cost models "
                              "learned from real FBGEMM kernel measurements. Tasks and plans are the "
                              "`shardplan/task@1` and `shardplan/plan@1` formats of DESIGN.md.")

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's own 422, except that a NaN or Infinity the client sent (Python's JSON parser reads them)
        # is echoed as text: encoding it as a number failed, and the client got a 500
        return JSONResponse(status_code=422, content={"detail": _json_safe(jsonable_encoder(exc.errors()))})

    @app.exception_handler(InputError)
    async def input_error(request: Request, exc: InputError) -> JSONResponse:
        kind = ("time_budget" if isinstance(exc, BudgetExceeded) else
                "infeasible" if isinstance(exc, InfeasibleError) else "input_error")
        msg = exc.problem + (f"; {exc.fix}" if exc.fix else "")
        return _error(422, _loc(exc.field), msg, kind)

    def estimator(profile: str, host_reference_ms: float | None = None) -> PlanEstimator:
        try:
            est = app.state.estimators[profile]
        except KeyError:
            raise InputError("profile", f"profile {profile!r} has no cost models in this service",
                             f"use one of {sorted(app.state.estimators)}") from None
        return est if host_reference_ms is None else est.at_host_state(host_reference_ms)

    async def off_loop(fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(app.state.executor, fn, *args)

    @app.get("/healthz", response_model=Health, tags=["service"])
    async def healthz() -> Health:
        return Health(status="ok", profiles=sorted(app.state.estimators), searchers=len(SEARCHERS))

    @app.get("/v1/searchers", response_model=list[SearcherInfo], tags=["planning"])
    async def searchers() -> list[SearcherInfo]:
        return [SearcherInfo(name=name, description=cls.description, default=name == DEFAULT_SEARCHER)
                for name, cls in sorted(SEARCHERS.items())]

    @app.get("/v1/profiles", response_model=list[ProfileInfo], tags=["planning"])
    async def profiles_() -> list[ProfileInfo]:
        out = []
        for p in PROFILES.values():
            est = app.state.estimators.get(p.name)
            out.append(ProfileInfo(name=p.name, device=p.device, description=p.description, loaded=est is not None,
                                   default=p.name == DEFAULT_PROFILE,
                                   compute_model=est.compute_name if est else None,
                                   comm_model=est.comm.name if est else None,
                                   optimizers=est.optimizers if est else [], dtypes=est.dtypes if est else []))
        return out

    @app.post("/v1/plans", response_model=PlanModel, responses=ERRORS, tags=["planning"])
    async def plans(
        task: TaskModel,
        searcher: SearcherName = SearcherName(DEFAULT_SEARCHER),
        seed: Annotated[int, Query(ge=0, le=2**32 - 1)] = 0,
        profile: ProfileName = ProfileName(DEFAULT_PROFILE),
        budget_s: Annotated[float, Query(gt=0, le=limits.max_budget_s,
                                         description="stop planning after this many seconds")] = limits.max_budget_s,
        sharding_types: Annotated[list[ShardingType] | None, Query(
            description="the types the plan may use (e.g. what gloo runs: table_wise, column_wise, "
                        "data_parallel); default any")] = None,
        host_reference_ms: HostReference = None,
    ) -> dict[str, Any]:
        """Plan a ``shardplan/task@1``; the answer is a ``shardplan/plan@1`` with its predicted cost."""
        domain_task = task_from_model(task)
        limits.check_task(domain_task)
        est = estimator(profile.value, host_reference_ms)
        types = [t.value for t in sharding_types] if sharding_types else None
        plan = await off_loop(_plan, domain_task, searcher.value, est, seed, budget_s, types)
        return plan_to_dict(plan)

    @app.post("/v1/evaluations", response_model=PlanModel, responses=ERRORS, tags=["planning"])
    async def evaluations(plan: PlanModel, profile: Annotated[ProfileName | None, Query(
            description="default: the profile that priced the plan (its cost block), else "
                        f"{DEFAULT_PROFILE} for CPU ranks")] = None,
                          host_reference_ms: HostReference = None) -> dict[str, Any]:
        """Check a ``shardplan/plan@1`` (tiling, ranks, memory) and return it with its predicted ``cost``."""
        domain_plan = plan_from_model(plan)
        limits.check_task(domain_plan.task, where="task.")
        est = estimator(profile_for(domain_plan, profile.value if profile else None), host_reference_ms)
        return plan_to_dict(await off_loop(_evaluate, domain_plan, est))

    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes)
    return app


def _plan(task: Task, searcher: str, est: PlanEstimator, seed: int, budget_s: float,
          sharding_types: list[str] | None) -> Plan:
    with time_budget(budget_s):
        return get_searcher(searcher, sharding_types).plan(task, est, seed=seed)


def _evaluate(plan: Plan, est: PlanEstimator) -> Plan:
    from dataclasses import replace

    validate_plan(plan)
    return replace(plan, cost=est.estimate(plan))
