"""Greedy placement by predicted cost.

Tables in descending order of their predicted cost alone; each goes whole to
the rank that leaves the partial plan's predicted cost (slowest rank, fused
compute + comm, from the learned model) lowest, among ranks with memory left.
A table that fits no rank whole is split row-wise over all ranks; if even that
does not fit, the task is infeasible and the error says which table and why.
"""
from __future__ import annotations

from ..cost.estimator import PlanEstimator
from ..domain import Plan, Shard, TableSharding, Task, Table
from ..errors import InfeasibleError
from ..memory import GB, shard_bytes, table_bytes
from ..cost.specs import ShardSpec
from .base import Searcher, register


def row_wise_shards(table: Table, ranks: list[int]) -> tuple[Shard, ...]:
    """Even row blocks over ``ranks`` (TorchRec's row-wise block size: ceil(rows / n))."""
    block = -(-table.num_embeddings // len(ranks))
    shards = []
    for i, r in enumerate(ranks):
        start = i * block
        rows = min(block, table.num_embeddings - start)
        if rows > 0:
            shards.append(Shard(rank=r, row_offset=start, num_rows=rows, col_offset=0,
                                num_cols=table.embedding_dim))
    return tuple(shards)


def table_wise(table: Table, rank: int) -> TableSharding:
    return TableSharding(table.name, "table_wise",
                         (Shard(rank, 0, table.num_embeddings, 0, table.embedding_dim),))


def solo_costs(task: Task, estimator: PlanEstimator) -> dict[str, float]:
    """Each table's predicted fwd+bwd compute alone on one rank."""
    sets = [[ShardSpec(t.name, t.num_embeddings, 0, t.num_embeddings, t.embedding_dim, t.pooling_factor,
                       t.zipf_alpha, task.global_batch_size)] for t in task.tables]
    return {t.name: f + b for t, (f, b) in zip(task.tables, estimator.rank_compute(sets))}


@register
class GreedyCostSearcher(Searcher):
    name = "greedy-cost"
    description = "tables by descending predicted cost, each to the rank that keeps the predicted plan cost lowest"

    def search(self, task: Task, estimator: PlanEstimator, seed: int) -> list[TableSharding]:
        world = task.topology.world_size
        cap = task.topology.memory_per_rank_gb * GB
        used = [0.0] * world
        placed: list[TableSharding] = []
        cost = solo_costs(task, estimator)
        for table in sorted(task.tables, key=lambda t: (-cost[t.name], t.name)):
            need = table_bytes(task, table)
            candidates = [r for r in range(world) if used[r] + need <= cap]
            if not candidates:
                ts = TableSharding(table.name, "row_wise", row_wise_shards(table, list(range(world))))
                extra = [shard_bytes(task, table, "row_wise", s) for s in ts.shards]
                if any(used[s.rank] + b > cap for s, b in zip(ts.shards, extra)):
                    raise InfeasibleError(
                        f"tables.{table.name}", f"needs {need / GB:.3f} GB and does not fit in any rank's "
                        f"remaining memory, even split row-wise over all {world} ranks",
                        "raise topology.memory_per_rank_gb or add ranks")
                for s, b in zip(ts.shards, extra):
                    used[s.rank] += b
                placed.append(ts)
                continue
            best = None
            for r in candidates:
                trial = placed + [table_wise(table, r)]
                c = estimator.estimate(Plan(task=task, tables=tuple(trial)))
                key = (c.max_ms, c.mean_ms, r)
                if best is None or key < best[0]:
                    best = (key, r)
            r = best[1]
            used[r] += need
            placed.append(table_wise(table, r))
        return placed
