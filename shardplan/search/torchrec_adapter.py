"""TorchRec both ways: its planner as a searcher, and our plans as TorchRec ``ShardingPlan``s.

* :class:`TorchRecSearcher` (``torchrec``) runs TorchRec's
  ``EmbeddingShardingPlanner`` on the task, given the task's pooling factors,
  batch size, optimizer and per-rank memory, and converts its ``ShardingPlan``.
  TorchRec's ``table_column_wise`` is our ``column_wise`` (column blocks placed
  anywhere); its shard offsets and sizes are ``ShardMetadata``'s, like ours.
* :func:`to_torchrec_plan` turns any of our plans into a ``ShardingPlan`` of
  ``ParameterSharding``s for an ``EmbeddingBagCollection`` whose tables carry the
  task's table names (module path ``module_path``); :func:`plan_from_torchrec`
  reads one back, so that a plan a trainer runs today is priced and measured as ours are.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import warnings
from collections.abc import Iterator

from ..cost.estimator import PlanEstimator
from ..cost.kernel import OPTIMIZER_NAMES
from ..domain import SHARDING_TYPES, Plan, Shard, Table, TableSharding, Task
from ..errors import InfeasibleError, InputError
from .base import Searcher, register
from .placement import replicas

_FROM_TORCHREC = {"table_column_wise": "column_wise"}
_TO_TORCHREC = {"column_wise": ("column_wise", "table_column_wise")}
EMBEDDING_LR = 0.01  # every table's, fused or (data-parallel replicas, execute.dmp) not
# One TorchRec planner run at a time: the warning filters _quiet_planner sets are process-wide, and two
# overlapping runs (threads of the REST service) would restore each other's saved filters out of order.
_PLANNER_LOCK = threading.Lock()


def feature_name(table: str) -> str:
    return f"f_{table}"


def embedding_bag_collection(task: Task, device: str = "meta"):
    """An ``EmbeddingBagCollection`` with one table (and one feature) per task table."""
    import torch
    from torchrec.modules.embedding_configs import DataType, EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection

    data_type = DataType(task.dtype.upper())  # TorchRec's planner sizes the weights by it
    return EmbeddingBagCollection(tables=[
        EmbeddingBagConfig(name=t.name, embedding_dim=t.embedding_dim, num_embeddings=t.num_embeddings,
                           feature_names=[feature_name(t.name)], data_type=data_type) for t in task.tables],
        device=torch.device(device))


def sharder(task: Task):
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder

    return EmbeddingBagCollectionSharder(fused_params={
        "optimizer": getattr(EmbOptimType, OPTIMIZER_NAMES[task.optimizer]), "learning_rate": EMBEDDING_LR})


def torchrec_topology(task: Task):
    """The task's ranks as TorchRec's planner sees them, built the way TorchRec asks (its ``TopologyFactory``;
    on 24 cpu-bench, gpu-bench and unseen-d tasks, 2026-11-26, the same topology and plans as a ``Topology``
    built directly): a rank's memory is its HBM on a GPU, its DDR on a CPU."""
    from torchrec.distributed.planner.types import KernelConfig, TopologyFactory, TrainerConfig

    topo = task.topology
    cap = int(topo.memory_per_rank_gb * 1024**3)
    kw = {"hbm_cap_bytes": cap} if topo.device == "cuda" else {"ddr_cap_bytes": cap}
    return TopologyFactory.create_topology(
        trainer_config=TrainerConfig(world_size=topo.world_size, local_world_size=topo.local_world_size, **kw),
        kernel_config=KernelConfig(compute_device=topo.device))


def type_from_torchrec(sharding_type: str, field: str) -> str:
    """Our name for one of TorchRec's sharding types (its two column-wise kinds are our one), or an
    :class:`InputError` naming ``field`` for a type we have none for."""
    ours = _FROM_TORCHREC.get(sharding_type, sharding_type)
    if ours not in SHARDING_TYPES:
        raise InputError(field, f"TorchRec's {sharding_type!r} has no shardplan counterpart",
                         f"use one of {list(SHARDING_TYPES)}")
    return ours


def from_torchrec_plan(task: Task, module_plan) -> list[TableSharding]:
    """Our table shardings from one module's TorchRec plan (``{table: ParameterSharding}``)."""
    out = []
    for t in task.tables:
        ps = module_plan[t.name]
        st = type_from_torchrec(ps.sharding_type, f"{t.name}.sharding_type")
        if st == "data_parallel":
            shards = replicas(t, task.topology.world_size).shards
        else:
            metas = ps.sharding_spec.shards
            devices = sorted({m.placement.device().type for m in metas} - {task.topology.device})
            if devices:  # a GPU job's plan priced as CPU ranks (or the reverse) would be another job's cost
                raise InputError("topology.device", f"is {task.topology.device!r} but the plan places "
                                 f"{t.name!r} on {devices[0]}", f"give the task of the job the plan is for "
                                 f"(topology.device {devices[0]!r})")
            shards = tuple(Shard(rank=m.placement.rank(), row_offset=m.shard_offsets[0], num_rows=m.shard_sizes[0],
                                 col_offset=m.shard_offsets[1], num_cols=m.shard_sizes[1]) for m in metas)
        kernel = getattr(ps.compute_kernel, "value", ps.compute_kernel)  # a plan may hold the enum or its value
        out.append(TableSharding(t.name, st, shards, compute_kernel=str(kernel)))
    return out


def plan_from_torchrec(task: Task, sharding_plan, module_path: str | None = None) -> Plan:
    """A TorchRec ``ShardingPlan`` (or one module's ``{table: ParameterSharding}``) of ``task``'s tables as a
    validated :class:`Plan`, to price or measure it like any other: the plan a trainer runs today, against
    shardplan's. Its tables are matched by name; ``module_path`` picks the module where the plan shards
    several (TorchRec's paths, e.g. ``"sparse_arch.embedding_bag_collection"``)."""
    from ..validate import validate_plan
    from .base import in_task_order

    modules = getattr(sharding_plan, "plan", None)
    if modules is None:  # already one module's plan
        module_plan, where = sharding_plan, "the module plan"
    elif module_path is not None:
        if module_path not in modules:
            raise InputError("module_path", f"{module_path!r} is not a module of the plan",
                             f"use one of {sorted(modules)}")
        module_plan, where = modules[module_path], f"module {module_path!r}"
    elif len(modules) == 1:
        (path, module_plan), = modules.items()
        where = f"module {path!r}"
    else:
        raise InputError("module_path", f"the plan shards {len(modules)} modules", f"name one: {sorted(modules)}")
    names = {t.name for t in task.tables}
    missing, extra = sorted(names - set(module_plan)), sorted(set(module_plan) - names)
    if missing or extra:
        raise InputError("tables", f"{where} and the task differ: "
                         + "; ".join(part for part in (f"not in the plan: {missing[:5]}" if missing else "",
                                                       f"not in the task: {extra[:5]}" if extra else "") if part),
                         "give the task whose tables the plan shards (names as the EmbeddingBagConfigs name them)")
    plan = in_task_order(task, from_torchrec_plan(task, module_plan))
    validate_plan(plan)
    return plan


def to_torchrec_plan(plan: Plan, module_path: str = ""):
    """A TorchRec ``ShardingPlan`` equal to ``plan``, for an EBC built by :func:`embedding_bag_collection`."""
    from torch.distributed._shard.sharding_spec import EnumerableShardingSpec, ShardMetadata
    from torchrec.distributed.sharding_plan import placement
    from torchrec.distributed.types import EmbeddingModuleShardingPlan, ParameterSharding, ShardingPlan

    topo = plan.task.topology
    module_plan = EmbeddingModuleShardingPlan()
    for ts in plan.tables:
        if ts.sharding_type == "data_parallel":  # a replica on every rank, as TorchRec's planner writes it
            module_plan[ts.name] = ParameterSharding(sharding_type="data_parallel", compute_kernel="dense",
                                                     ranks=list(range(topo.world_size)), sharding_spec=None)
            continue
        st = ts.sharding_type
        if st == "column_wise" and len({s.rank for s in ts.shards}) < len(ts.shards):
            st = "table_column_wise"  # several column blocks share a rank
        # TorchRec's own placement string: a GPU shard names its local device ("rank:5/cuda:1")
        metas = [ShardMetadata(shard_offsets=[s.row_offset, s.col_offset], shard_sizes=[s.num_rows, s.num_cols],
                               placement=placement(topo.device, s.rank, topo.local_world_size)) for s in ts.shards]
        module_plan[ts.name] = ParameterSharding(sharding_type=st, compute_kernel=ts.compute_kernel,
                                                 ranks=[s.rank for s in ts.shards],
                                                 sharding_spec=EnumerableShardingSpec(metas))
    return ShardingPlan(plan={module_path: module_plan})


@register
class TorchRecSearcher(Searcher):
    name = "torchrec"
    description = "TorchRec's EmbeddingShardingPlanner (its own estimators), converted"

    def search(self, task: Task, estimator: PlanEstimator, seed: int) -> list[TableSharding]:
        return torchrec_shardings(task)


class _PlannerNoise(logging.Filter):
    """Drops the warnings TorchRec's planner logs on every dry run of a task of ours: a data-parallel
    table's missing sharding spec, and the unmaterialised dense tensors (we give it none)."""

    NOISE = ("Sharding spec not found for ", "There is a known issue with TorchRec's dense tensor size")

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.NOISE)


@contextlib.contextmanager
def _quiet_planner() -> Iterator[None]:
    """TorchRec's planner without the warnings it raises on every plan of ours (none is actionable by a
    user of shardplan: they are about the default storage reservation and data-parallel tables, which
    are what TorchRec's users get too). Other warnings and errors pass. Runs hold ``_PLANNER_LOCK``."""
    noise = _PlannerNoise()
    loggers = [logging.getLogger(), logging.getLogger("torchrec.distributed.planner.storage_reservations")]
    with _PLANNER_LOCK, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="HeuristicalStorageReservation is known to cause issues",
                                category=FutureWarning)
        for lg in loggers:
            lg.addFilter(noise)
        try:
            yield
        finally:
            for lg in loggers:
                lg.removeFilter(noise)


def torchrec_shardings(task: Task) -> list[TableSharding]:
    """TorchRec's planner on ``task``, given each table's allowed sharding types as its constraints."""
    from torchrec.distributed.planner import EmbeddingShardingPlanner
    from torchrec.distributed.planner.types import ParameterConstraints, PlannerError

    def theirs(t: Table) -> list[str] | None:
        """The table's allowed types in TorchRec's names: our column_wise is both of TorchRec's column-wise
        kinds."""
        if t.sharding_types is None:
            return None
        ours = [k for k in SHARDING_TYPES if t.allows(k)]
        return sorted({n for k in ours for n in _TO_TORCHREC.get(k, (k,))})

    constraints = {t.name: ParameterConstraints(pooling_factors=[max(t.pooling_factor, 1e-3)],
                                                sharding_types=theirs(t))
                   for t in task.tables}
    try:
        with _quiet_planner():
            planner = EmbeddingShardingPlanner(topology=torchrec_topology(task),
                                               batch_size=task.batch_size_per_rank, constraints=constraints)
            plan = planner.plan(embedding_bag_collection(task), [sharder(task)])
    except (PlannerError, RuntimeError) as e:  # RuntimeError: no sharding type left for a table's constraints
        first = str(e).strip().splitlines()[0]
        raise InfeasibleError("task", f"TorchRec's planner found no plan: {first}",
                              "TorchRec cannot place this task; use another searcher") from None
    return from_torchrec_plan(task, plan.plan[""])
