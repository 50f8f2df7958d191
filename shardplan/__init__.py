"""shardplan: embedding-table sharding plans from cost models learned on real FBGEMM kernels.

The one-line happy path is :func:`shardplan.plan`; see :mod:`shardplan.planning`.
"""
from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("shardplan")
except _metadata.PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0+unknown"

from .domain import Plan, PlanCost, RankCost, Shard, Table, TableSharding, Task, Topology  # noqa: F401
from .errors import InfeasibleError, InputError  # noqa: F401
from .formats import load_plan, load_task, save_plan, save_task  # noqa: F401
from .planning import estimator, evaluate, make_task, plan  # noqa: F401
from .validate import plan_problems, validate_plan  # noqa: F401

# the public API: what ``from shardplan import *`` gives and what the docs promise to keep
__all__ = ["InfeasibleError", "InputError", "Plan", "PlanCost", "RankCost", "Shard", "Table", "TableSharding",
           "Task", "Topology", "__version__", "estimator", "evaluate", "from_torchrec_plan", "load_plan", "load_task",
           "make_task", "plan", "plan_problems", "save_plan", "save_task", "to_torchrec_plan", "validate_plan"]


def to_torchrec_plan(p: Plan, module_path: str = ""):
    """The TorchRec ``ShardingPlan`` of a plan, for ``DistributedModelParallel(model, plan=...)``: ``module_path``
    is where the model holds its ``EmbeddingBagCollection`` (e.g. ``"sparse_arch.embedding_bag_collection"``;
    "" when the collection is the model), whose tables carry the task's table names
    (see :mod:`shardplan.search.torchrec_adapter`)."""
    from .search.torchrec_adapter import to_torchrec_plan as convert

    return convert(p, module_path)


def from_torchrec_plan(task: Task, sharding_plan, module_path: str | None = None) -> Plan:
    """A TorchRec ``ShardingPlan`` of ``task``'s tables as a validated :class:`Plan`, ready for
    :func:`evaluate` (see :func:`shardplan.search.torchrec_adapter.plan_from_torchrec`)."""
    from .search.torchrec_adapter import plan_from_torchrec

    return plan_from_torchrec(task, sharding_plan, module_path)
