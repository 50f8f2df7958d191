"""Reading and writing ``shardplan/task@1`` and ``shardplan/plan@1`` JSON.

``load_*`` accept a path, a JSON string or an already-parsed dict and return
the domain dataclasses; every problem is an :class:`~shardplan.errors.InputError`
naming the field. ``save_*`` write atomically (temp file + rename) so a failed
run never leaves half a file behind.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Union, get_args

from pydantic import BaseModel, ValidationError

from .domain import (DEFAULT_MEMORY_GB, Plan, PlanCost, RankCost, Shard, Table, TableSharding,
                     Task, Topology)
from .errors import InputError
from .schema import PLAN_FORMAT, TASK_FORMAT, CostModel, PlanModel, TaskModel

Source = Union[str, os.PathLike, dict]


def _field_path(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def parse_model(model: type[BaseModel], data: Any, what: str, where: str = "DESIGN.md") -> Any:
    """``data`` validated by ``model``, or an :class:`InputError` naming the first bad field; ``what`` and
    ``where`` name the format and the document that defines it, for the fix of a missing field."""
    if not isinstance(data, dict):
        raise InputError("", f"a {what} must be a JSON object, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        # Pydantic adds the failing validator's name to the location of union/literal
        # errors; the user only needs the field path.
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            raise InputError(_field_path(loc), "is required", f"see {where}'s {what} format") from None
        if err["type"] == "literal_error" and loc == ("format",):
            expected = get_args(model.model_fields["format"].annotation)[0]
            raise InputError("format", f"is {err.get('input')!r}", f"set it to {expected!r}") from None
        got = err.get("input")
        shown = f" (got {got!r})" if isinstance(got, (str, int, float, bool)) or got is None else ""
        raise InputError(_field_path(loc), msg + shown) from None


def read_json(source: Source) -> Any:
    """The parsed JSON of a path, a JSON text or an already-parsed dict; malformed JSON or a missing file
    is an :class:`InputError` naming it."""
    if isinstance(source, dict):
        return source
    if isinstance(source, str) and source.lstrip().startswith("{"):
        raw, where = source, "json"
    else:
        path = Path(source)
        if not path.is_file():
            raise InputError(str(path), "no such file")
        raw, where = path.read_text(), str(path)
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        raise InputError(where, f"malformed JSON at line {e.lineno} column {e.colno}: {e.msg}",
                         "fix the JSON syntax") from None


def _extra(model: BaseModel) -> dict[str, Any]:
    return dict(model.model_extra or {})


def task_from_model(m: TaskModel) -> Task:
    topo = m.topology
    tables = tuple(Table(name=t.name, num_embeddings=t.num_embeddings, embedding_dim=t.embedding_dim,
                         pooling_factor=float(t.pooling_factor), zipf_alpha=float(t.zipf_alpha),
                         sharding_types=tuple(t.sharding_types) if t.sharding_types is not None else None,
                         extra=_extra(t)) for t in m.tables)
    topology = Topology(
        world_size=topo.world_size, local_world_size=topo.local_world_size or topo.world_size,
        device=topo.device,
        memory_per_rank_gb=float(topo.memory_per_rank_gb or DEFAULT_MEMORY_GB[topo.device]),
        extra=_extra(topo))
    return Task(name=m.name, tables=tables, topology=topology,
                batch_size_per_rank=m.batch_size_per_rank, optimizer=m.optimizer, dtype=m.dtype,
                extra=_extra(m))


def load_task(source: Source) -> Task:
    """Read a ``shardplan/task@1`` from a path, JSON text or dict."""
    return task_from_model(parse_model(TaskModel, read_json(source), "task"))


def table_to_dict(t: Table) -> dict[str, Any]:
    """A table as the task file lists it."""
    return {"name": t.name, "num_embeddings": t.num_embeddings, "embedding_dim": t.embedding_dim,
            "pooling_factor": t.pooling_factor, "zipf_alpha": t.zipf_alpha,
            **({"sharding_types": list(t.sharding_types)} if t.sharding_types is not None else {}), **t.extra}


def task_to_dict(task: Task) -> dict[str, Any]:
    return {
        "format": TASK_FORMAT,
        "name": task.name,
        "tables": [table_to_dict(t) for t in task.tables],
        "topology": {"world_size": task.topology.world_size,
                     "local_world_size": task.topology.local_world_size,
                     "device": task.topology.device,
                     "memory_per_rank_gb": task.topology.memory_per_rank_gb,
                     **task.topology.extra},
        "batch_size_per_rank": task.batch_size_per_rank,
        "optimizer": task.optimizer,
        "dtype": task.dtype,
        **task.extra,
    }


def _cost_from_model(m: CostModel | None) -> PlanCost | None:
    if m is None:
        return None
    return PlanCost(kind=m.kind, profile=m.profile, extra=_extra(m), per_rank=tuple(
        RankCost(rank=r.rank, fwd_compute_ms=r.fwd_compute_ms, bwd_compute_ms=r.bwd_compute_ms,
                 fwd_comm_ms=r.fwd_comm_ms, bwd_comm_ms=r.bwd_comm_ms, memory_gb=r.memory_gb)
        for r in m.per_rank))


def cost_to_dict(cost: PlanCost) -> dict[str, Any]:
    return {"kind": cost.kind, "profile": cost.profile, "max_ms": round(cost.max_ms, 4),
            "per_rank": [{"rank": r.rank, "fwd_compute_ms": round(r.fwd_compute_ms, 4),
                          "bwd_compute_ms": round(r.bwd_compute_ms, 4),
                          "fwd_comm_ms": round(r.fwd_comm_ms, 4),
                          "bwd_comm_ms": round(r.bwd_comm_ms, 4),
                          "memory_gb": round(r.memory_gb, 6)} for r in cost.per_rank],
            **cost.extra}


def load_plan(source: Source) -> Plan:
    """Read a ``shardplan/plan@1``. Structure only; :func:`shardplan.validate.validate_plan` checks tiling
    and memory."""
    return plan_from_model(parse_model(PlanModel, read_json(source), "plan"))


def plan_from_model(m: PlanModel) -> Plan:
    task = task_from_model(m.task)
    tables = tuple(TableSharding(name=t.name, sharding_type=t.sharding_type,
                                 compute_kernel=t.compute_kernel,
                                 shards=tuple(Shard(s.rank, s.row_offset, s.num_rows, s.col_offset,
                                                    s.num_cols) for s in t.shards))
                   for t in m.tables)
    return Plan(task=task, tables=tables, cost=_cost_from_model(m.cost),
                measured_cost=_cost_from_model(m.measured_cost), search=m.search, extra=_extra(m))


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    out: dict[str, Any] = {
        "format": PLAN_FORMAT,
        "task": task_to_dict(plan.task),
        "tables": [{"name": t.name, "sharding_type": t.sharding_type,
                    "compute_kernel": t.compute_kernel,
                    "shards": [{"rank": s.rank, "row_offset": s.row_offset, "num_rows": s.num_rows,
                                "col_offset": s.col_offset, "num_cols": s.num_cols}
                               for s in t.shards]} for t in plan.tables],
    }
    if plan.cost is not None:
        out["cost"] = cost_to_dict(plan.cost)
    if plan.measured_cost is not None:
        out["measured_cost"] = cost_to_dict(plan.measured_cost)
    if plan.search is not None:
        out["search"] = plan.search
    out.update(plan.extra)
    return out


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` via a temp file in the same folder, renamed into place, so a
    failed run never leaves half a file behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; these are ordinary files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    """Write JSON (indented) atomically, as :func:`write_text_atomic`."""
    write_text_atomic(path, json.dumps(data, indent=2) + "\n")


def save_task(task: Task, path: str | os.PathLike) -> None:
    write_json_atomic(path, task_to_dict(task))


def save_plan(plan: Plan, path: str | os.PathLike) -> None:
    write_json_atomic(path, plan_to_dict(plan))
