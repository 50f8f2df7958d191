"""The Python planning API: one call for the common case, the objects underneath for the rest.

>>> import shardplan
>>> plan = shardplan.plan(
...     [{"name": "user", "num_embeddings": 200_000, "embedding_dim": 64, "pooling_factor": 8.0, "zipf_alpha": 1.1},
...      {"name": "item", "num_embeddings": 50_000, "embedding_dim": 32, "pooling_factor": 20.0},
...      {"name": "ctx", "num_embeddings": 1_000, "embedding_dim": 16, "pooling_factor": 1.0}],
...     world_size=2, batch_size_per_rank=256)
>>> sorted(t.name for t in plan.tables)
['ctx', 'item', 'user']
>>> plan.cost.kind, len(plan.cost.per_rank)
('predicted', 2)
>>> shardplan.validate_plan(plan)   # raises InputError if the plan were invalid
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Iterable

from .cost.estimator import PRICED_KERNELS, PlanEstimator, load_estimator
from .cost.profiles import DEFAULT_PROFILE, get_profile, profile_for
from .domain import Plan, Table, Task
from .errors import InputError
from .formats import load_task, table_to_dict
from .schema import TASK_FORMAT


@lru_cache(maxsize=8)
def estimator(profile: str = DEFAULT_PROFILE, host_reference_ms: float | None = None) -> PlanEstimator:
    """The profile's committed cost models (loaded once per process and host reference).

    ``host_reference_ms`` (GPU profiles): price at the state of a host whose reference workload runs in
    that many ms (``shardplan profiles --host-reference`` times it on the machine), as the CLI's
    ``--host-reference-ms`` and the REST service's ``host_reference_ms`` do."""
    return load_estimator(profile, host_reference_ms=host_reference_ms)


def make_task(tables: Iterable[Table | dict[str, Any]], world_size: int, *, local_world_size: int | None = None,
              device: str = "cpu", memory_per_rank_gb: float | None = None, batch_size_per_rank: int = 512,
              optimizer: str = "sgd", dtype: str | None = None, name: str = "task",
              pooling_factors: dict[str, float] | None = None, zipf_alphas: dict[str, float] | None = None,
              constraints: dict[str, Any] | None = None) -> Task:
    """A validated :class:`Task` from tables: dicts with the task file's fields, :class:`Table` objects, or
    a trainer's TorchRec ``EmbeddingBagConfig`` objects as they are (``ebc.embedding_bag_configs()``), whose mean
    ids per sample come from ``pooling_factors`` by table name (what TorchRec's planner takes as
    ``ParameterConstraints.pooling_factors``) and skew from ``zipf_alphas`` (default 0: uniform).

    ``constraints`` are the trainer's TorchRec ``ParameterConstraints`` by table name, as its planner takes
    them: a config's pooling factor (where ``pooling_factors`` gives none) is the mean of theirs (TorchRec's
    default, 1.0, where they set none), its allowed sharding types theirs (the task file's per-table
    ``sharding_types``); a constraint that allows only kernels the cost data never timed is refused.

    ``dtype`` is the weights' type (the task file's ``dtype``: fp32, fp16, bf16, int8); left out, it is the
    TorchRec configs' ``data_type`` (one for all tables: a task has one weight type), else fp32."""
    pooling_factors, zipf_alphas, constraints = pooling_factors or {}, zipf_alphas or {}, constraints or {}
    tables = list(tables)
    rows = [_table_row(t, pooling_factors, zipf_alphas, constraints) for t in tables]
    configs = sorted(t.name for t in tables if not isinstance(t, (dict, Table)))  # _table_row took them
    for field, given in (("pooling_factors", pooling_factors), ("zipf_alphas", zipf_alphas),
                         ("constraints", constraints)):
        stray = sorted(k for k in given if k not in configs)
        if stray:  # a misspelt name would leave its table at the default, a dict's own value would win, unsaid
            raise InputError(f"{field}[{stray[0]!r}]", "names no TorchRec table config of the task (a dict or "
                             "Table carries its own)", f"key it by the configs' names: {configs[:5]}")
    topo: dict[str, Any] = {"world_size": world_size, "device": device}
    if local_world_size is not None:
        topo["local_world_size"] = local_world_size
    if memory_per_rank_gb is not None:
        topo["memory_per_rank_gb"] = memory_per_rank_gb
    data = {"format": TASK_FORMAT, "name": name, "tables": rows, "topology": topo,
            "batch_size_per_rank": batch_size_per_rank, "optimizer": optimizer,
            "dtype": _task_dtype(tables, dtype)}
    return load_task(data)  # the file format's validation, so errors name the same fields


# TorchRec's DataType values and the task file's dtypes they are
TORCHREC_DTYPES = {"FP32": "fp32", "FP16": "fp16", "BF16": "bf16", "INT8": "int8"}


def _task_dtype(tables: list[Any], given: str | None) -> str:
    """The task's weight type: ``given``, checked against the TorchRec configs' ``data_type``s, else theirs."""
    found: dict[str, str] = {}  # dtype -> the first config that has it
    for t in tables:
        data_type = getattr(t, "data_type", None)  # a TorchRec config's; dicts and Tables have none
        if data_type is None:
            continue
        value = str(getattr(data_type, "value", data_type))
        if value not in TORCHREC_DTYPES:
            raise InputError(f"tables[{t.name!r}].data_type", f"TorchRec's {value} has no shardplan weight type",
                             f"use one of {sorted(TORCHREC_DTYPES)}")
        found.setdefault(TORCHREC_DTYPES[value], t.name)
    if len(found) > 1:
        mixed = ", ".join(f"{d} ({n!r})" for d, n in found.items())
        raise InputError("tables", f"the TorchRec configs mix weight types: {mixed}; a task has one",
                         "plan each weight type's tables as a task of its own")
    if given is not None and found and given not in found:
        (theirs, first), = found.items()
        raise InputError("dtype", f"is {given!r}, but the TorchRec configs' data_type is {theirs} "
                         f"(table {first!r})", f"pass dtype={theirs!r} or leave it out")
    return given if given is not None else next(iter(found), "fp32")


def _from_constraint(name: str, c: Any) -> dict[str, Any]:
    """The task-file fields a TorchRec ``ParameterConstraints`` gives table ``name``: its pooling factor and
    its sharding types in shardplan's names."""
    from .search.torchrec_adapter import type_from_torchrec

    kernels = list(getattr(c, "compute_kernels", None) or [])
    if kernels and not set(kernels) & set(PRICED_KERNELS):
        raise InputError(f"constraints[{name!r}].compute_kernels", f"allows only {kernels}, which shardplan's "
                         "cost data never timed", f"allow {PRICED_KERNELS[0]!r} (the weights in device memory)")
    out: dict[str, Any] = {}
    factors = list(getattr(c, "pooling_factors", None) or [])
    if factors:
        out["pooling_factor"] = sum(factors) / len(factors)
    types = getattr(c, "sharding_types", None)
    if types:
        out["sharding_types"] = list(dict.fromkeys(
            type_from_torchrec(k, f"constraints[{name!r}].sharding_types") for k in types))
    return out


def _table_row(t: Any, pooling_factors: dict[str, float], zipf_alphas: dict[str, float],
               constraints: dict[str, Any]) -> dict[str, Any]:
    """One task-file table entry from a dict, a :class:`Table`, or a TorchRec ``EmbeddingBagConfig``."""
    if isinstance(t, dict):
        return t
    if isinstance(t, Table):
        return table_to_dict(t)
    pooling = getattr(getattr(t, "pooling", None), "value", None)
    if type(t).__name__ == "EmbeddingConfig" or pooling == "NONE":  # one vector per id, unpooled
        raise InputError(f"tables[{t.name!r}]", "is a sequence (unpooled) embedding, whose cost shardplan does "
                         "not model", "plan the EmbeddingBagCollection's pooled tables (SUM or MEAN)")
    if all(hasattr(t, a) for a in ("name", "num_embeddings", "embedding_dim")):  # TorchRec's config, duck-typed
        features = list(getattr(t, "feature_names", None) or [])
        if len(features) > 1:  # each feature is a bag of its own per sample: a cost shardplan's data never timed
            raise InputError(f"tables[{t.name!r}].feature_names", f"the table is looked up by {len(features)} "
                             f"features ({', '.join(features[:3])}), and shardplan prices one bag per sample a "
                             "table", "plan the tables looked up by one feature; shared tables are not modelled")
        given = _from_constraint(t.name, constraints[t.name]) if t.name in constraints else {}
        if t.name in pooling_factors:
            given["pooling_factor"] = pooling_factors[t.name]
        if "pooling_factor" not in given:
            raise InputError(f"pooling_factors[{t.name!r}]", "is required for a TorchRec table config (it holds "
                             "no pooling factor)", "pass pooling_factors={table name: mean ids per sample}, or "
                             "the trainer's constraints={table name: ParameterConstraints}")
        return {"name": t.name, "num_embeddings": t.num_embeddings, "embedding_dim": t.embedding_dim,
                "zipf_alpha": zipf_alphas.get(t.name, 0.0), **given}
    raise InputError("tables", f"a table must be a dict, a shardplan Table or a TorchRec EmbeddingBagConfig, "
                     f"got {type(t).__name__}")


def plan(tables: Iterable[Table | dict[str, Any]] | Task, world_size: int | None = None, *,
         searcher: str | None = None, profile: str = DEFAULT_PROFILE, seed: int = 0,
         sharding_types: Iterable[str] | None = None, refine: int = 0, host_reference_ms: float | None = None,
         **task_fields: Any) -> Plan:
    """Plan tables for a topology with the default searcher and profile; returns a :class:`Plan`.

    ``tables`` may also be a ready :class:`Task` (then ``world_size`` and the
    task fields are not given). ``task_fields`` are :func:`make_task`'s keywords; ``device`` defaults
    to the profile's (a task of another device than the profile's is refused).
    ``sharding_types`` limits the plan to those types, e.g. what TorchRec can run
    on CPU over gloo: ``("table_wise", "column_wise", "data_parallel")``.
    ``refine=N`` times the plan's ranks on this machine's kernels and re-polishes it
    against the measured per-rank error up to N times (:mod:`shardplan.search.refine`;
    the profile's hardware must be this machine's). ``host_reference_ms`` as in :func:`estimator`.
    """
    from .search import DEFAULT_SEARCHER, get_searcher

    if isinstance(tables, Task):
        if world_size is not None or task_fields:
            raise InputError("world_size", "is given by the Task", "pass either a Task or tables and world_size")
        task = tables
    elif world_size is None:
        raise InputError("world_size", "is required with a list of tables", "pass world_size=<ranks>")
    else:  # ranks of the profile's device unless told otherwise, so the memory default is that device's
        task = make_task(tables, world_size, **{"device": get_profile(profile).device, **task_fields})
    if not isinstance(refine, int) or refine < 0:
        raise InputError("refine", f"must be 0 (off) or a number of timings, got {refine!r}")
    chosen = get_searcher(searcher or DEFAULT_SEARCHER, sharding_types)
    priced = estimator(profile, host_reference_ms)
    if not refine:
        return chosen.plan(task, priced, seed=seed)
    from .search.refine import plan_refined

    return plan_refined(chosen, task, priced, profile, seed=seed, iterations=refine)


def evaluate(p: Plan, *, measure: bool = False, profile: str | None = None, rounds: int = 1,
             host_reference_ms: float | None = None) -> Plan:
    """``p`` with its predicted cost filled (``host_reference_ms`` as in :func:`estimator`), and with
    ``measure=True`` its measured cost too. ``profile`` defaults to the one that priced ``p`` (its cost
    block), else to the default CPU profile for CPU ranks (:func:`~shardplan.cost.profiles.profile_for`)."""
    from dataclasses import replace

    from .execute.measure import measure_plan
    from .validate import validate_plan

    validate_plan(p)
    profile = profile_for(p, profile)
    out = replace(p, cost=estimator(profile, host_reference_ms).estimate(p))
    return replace(out, measured_cost=measure_plan(out, profile, rounds)) if measure else out
