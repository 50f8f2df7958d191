"""Per-rank memory of a plan: weights + optimizer state + working buffers.

Optimizer state per shard (FBGEMM's fused optimizers): SGD none; row-wise
Adagrad one fp32 per row; Adagrad one fp32 per weight; Adam two fp32 per
weight. Buffers: per shard, the pooled output of the shard for the batch it
serves and its gradient (fp32, ``2 * batch * cols * 4`` bytes) and the ids and
offsets fed to it (int64); per rank, whatever it holds, the local batch's
pooled embeddings of every table as the trainer receives them after the
all-to-all, and their gradient (:func:`received_bytes`). TorchRec's planner
budgets the shards in the same way (storage = weights + optimizer + I/O
buffers) and keeps a share of memory back for the rest; the received
embeddings are the part of that rest which every embedding-sharded trainer
holds (``bench/dmp_memory.py`` compares all of it with real
DistributedModelParallel runs).
"""
from __future__ import annotations

from dataclasses import dataclass

from .domain import DTYPE_BYTES, Plan, Shard, Table, Task
from .errors import InfeasibleError

GB = 1024**3


def optimizer_state_bytes(optimizer: str, rows: int, cols: int) -> int:
    if optimizer == "sgd":
        return 0
    if optimizer == "rowwise_adagrad":
        return rows * 4
    if optimizer == "adagrad":
        return rows * cols * 4
    if optimizer == "adam":
        return 2 * rows * cols * 4
    raise ValueError(f"unknown optimizer {optimizer!r}")


def shard_batch(task: Task, sharding_type: str) -> int:
    """The batch a shard serves: a data-parallel replica sees the local batch, others the global one."""
    return task.batch_size_per_rank if sharding_type == "data_parallel" else task.global_batch_size


@dataclass(frozen=True)
class MemoryParts:
    """Bytes a shard (or a rank's shards) holds: what the trainer allocates for good, and the per-batch buffers."""

    weights: int
    optimizer_state: int
    buffers: int

    @property
    def total(self) -> int:
        return self.weights + self.optimizer_state + self.buffers

    def __add__(self, other: MemoryParts) -> MemoryParts:
        return MemoryParts(self.weights + other.weights, self.optimizer_state + other.optimizer_state,
                           self.buffers + other.buffers)


def shard_memory(task: Task, table: Table, sharding_type: str, shard: Shard) -> MemoryParts:
    rows, cols = shard.num_rows, shard.num_cols
    batch = shard_batch(task, sharding_type)
    pooled_ids = int(batch * table.pooling_factor * min(1.0, rows / table.num_embeddings)) + batch + 1
    return MemoryParts(weights=rows * cols * DTYPE_BYTES[task.dtype],
                       optimizer_state=optimizer_state_bytes(task.optimizer, rows, cols),
                       buffers=2 * batch * cols * 4 + pooled_ids * 8)


def shard_bytes(task: Task, table: Table, sharding_type: str, shard: Shard) -> int:
    return shard_memory(task, table, sharding_type, shard).total


def received_bytes(task: Task) -> int:
    """Bytes every rank holds, whatever its shards, for the local batch's pooled embeddings of all
    tables (TorchRec's ``KeyedTensor`` after the output all-to-all) and their gradient: fp32,
    ``2 * local batch * sum of dims * 4``."""
    return 2 * task.batch_size_per_rank * sum(t.embedding_dim for t in task.tables) * 4


def capacity_bytes(task: Task) -> float:
    """What a rank has for its shards: its memory less :func:`received_bytes` (searchers place against this)."""
    cap = task.topology.memory_per_rank_gb * GB
    received = received_bytes(task)
    if received >= cap:
        raise InfeasibleError(
            "topology.memory_per_rank_gb", f"every rank needs {received / GB:.4g} GB for the pooled embeddings it "
            f"receives (batch_size_per_rank {task.batch_size_per_rank} x the tables' summed dims, and their "
            f"gradient), and has {task.topology.memory_per_rank_gb:g} GB",
            "raise memory_per_rank_gb or lower batch_size_per_rank")
    return cap - received


def table_bytes(task: Task, table: Table) -> int:
    """The memory of a whole table placed table-wise on one rank."""
    return shard_bytes(task, table, "table_wise", Shard(0, 0, table.num_embeddings, 0, table.embedding_dim))


def rank_memory(plan: Plan) -> list[MemoryParts]:
    """Each rank's memory by part: the sum over the shards it holds, and what every rank receives."""
    out = []
    for items in plan.rank_shards():
        parts = MemoryParts(0, 0, received_bytes(plan.task))
        for t, st, sh in items:
            parts = parts + shard_memory(plan.task, t, st, sh)
        out.append(parts)
    return out


def rank_memory_gb(plan: Plan) -> list[float]:
    return [m.total / GB for m in rank_memory(plan)]
