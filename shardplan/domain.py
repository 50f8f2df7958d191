"""The domain: tables, topology, tasks, shards, plans and their costs.

Plain dataclasses; reading and writing them as JSON lives in
:mod:`shardplan.formats`, checking a plan in :mod:`shardplan.validate`.
Unknown JSON fields are kept in each object's ``extra`` so that a file read and
written again loses nothing (DESIGN.md: unknown fields are kept).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

SHARDING_TYPES = ("table_wise", "column_wise", "row_wise", "table_row_wise", "data_parallel")
ShardingType = Literal["table_wise", "column_wise", "row_wise", "table_row_wise", "data_parallel"]
OPTIMIZERS = ("sgd", "rowwise_adagrad", "adagrad", "adam")
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1}
# Default memory per rank when a task does not say: a small CPU process, a GPU's HBM.
DEFAULT_MEMORY_GB = {"cpu": 4.0, "cuda": 80.0}


@dataclass(frozen=True)
class Table:
    """One embedding table.

    ``pooling_factor`` is the mean number of ids one sample looks up;
    ``zipf_alpha`` the exponent of the Zipf law its ids follow (0 = uniform);
    ``sharding_types``, when given, the only ways a plan may shard it (TorchRec's per-table
    ``ParameterConstraints.sharding_types``), e.g. ``("data_parallel",)`` for a small table every
    rank should hold.
    """

    name: str
    num_embeddings: int
    embedding_dim: int
    pooling_factor: float
    zipf_alpha: float = 0.0
    sharding_types: tuple[str, ...] | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def allows(self, sharding_type: str) -> bool:
        """Whether a plan may shard this table ``sharding_type``'s way."""
        return self.sharding_types is None or sharding_type in self.sharding_types


@dataclass(frozen=True)
class Topology:
    world_size: int
    local_world_size: int
    device: str = "cpu"
    memory_per_rank_gb: float = DEFAULT_MEMORY_GB["cpu"]
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def num_hosts(self) -> int:
        return self.world_size // self.local_world_size

    def host_of(self, rank: int) -> int:
        return rank // self.local_world_size

    def host_ranks(self, host: int) -> list[int]:
        """The ranks of ``host``, in order."""
        return list(range(host * self.local_world_size, (host + 1) * self.local_world_size))


@dataclass(frozen=True)
class Task:
    """What a user asks to plan."""

    name: str
    tables: tuple[Table, ...]
    topology: Topology
    batch_size_per_rank: int = 512
    optimizer: str = "sgd"
    dtype: str = "fp32"
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def global_batch_size(self) -> int:
        return self.batch_size_per_rank * self.topology.world_size

    @cached_property
    def _by_name(self) -> dict[str, Table]:
        return {t.name: t for t in self.tables}

    def table(self, name: str) -> Table:
        """The table called ``name`` (KeyError if none); searchers call this in their inner loops."""
        return self._by_name[name]

    def table_field(self, name: str) -> str:
        """Where the table called ``name`` is in the task file, as errors name fields: ``tables[3]``."""
        return f"tables[{[t.name for t in self.tables].index(name)}]"


@dataclass(frozen=True)
class Shard:
    """A ``num_rows x num_cols`` rectangle of a table, on one rank (TorchRec ShardMetadata)."""

    rank: int
    row_offset: int
    num_rows: int
    col_offset: int
    num_cols: int


@dataclass(frozen=True)
class TableSharding:
    name: str
    sharding_type: str
    shards: tuple[Shard, ...]
    compute_kernel: str = "fused"


@dataclass(frozen=True)
class RankCost:
    rank: int
    fwd_compute_ms: float
    bwd_compute_ms: float
    fwd_comm_ms: float
    bwd_comm_ms: float
    memory_gb: float

    @property
    def compute_ms(self) -> float:
        return self.fwd_compute_ms + self.bwd_compute_ms

    @property
    def comm_ms(self) -> float:
        return self.fwd_comm_ms + self.bwd_comm_ms

    @property
    def total_ms(self) -> float:
        return self.compute_ms + self.comm_ms


@dataclass(frozen=True)
class PlanCost:
    """The cost block of a plan: ``kind`` is ``predicted`` or ``measured``."""

    kind: str
    profile: str
    per_rank: tuple[RankCost, ...]
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def max_ms(self) -> float:
        return max(r.total_ms for r in self.per_rank)

    @property
    def mean_ms(self) -> float:
        return sum(r.total_ms for r in self.per_rank) / len(self.per_rank)

    @property
    def imbalance(self) -> float:
        """Slowest rank over mean rank (1.0 = perfectly balanced)."""
        return self.max_ms / self.mean_ms if self.mean_ms > 0 else 1.0


@dataclass(frozen=True)
class Plan:
    task: Task
    tables: tuple[TableSharding, ...]
    cost: PlanCost | None = None
    measured_cost: PlanCost | None = None
    search: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def sharding(self, name: str) -> TableSharding:
        for s in self.tables:
            if s.name == name:
                return s
        raise KeyError(name)

    def rank_shards(self) -> list[list[tuple[Table, str, Shard]]]:
        """Per rank, the (table, sharding type, shard) triples it holds."""
        out: list[list[tuple[Table, str, Shard]]] = [[] for _ in range(self.task.topology.world_size)]
        tables = {t.name: t for t in self.task.tables}
        for ts in self.tables:
            for sh in ts.shards:
                out[sh.rank].append((tables[ts.name], ts.sharding_type, sh))
        return out
