"""Greedy placement by predicted cost.

Tables in descending order of their predicted cost alone; each goes whole to
the rank that leaves the partial plan's predicted cost (slowest rank, fused
compute + comm, from the learned model) lowest, among ranks with memory left.
A table that fits no rank whole is split row-wise over all ranks; if even that
does not fit, the task is infeasible and the error says which table and why.
A task's per-table sharding types are honoured as the baselines honour them
(:mod:`.heuristics`).
"""
from __future__ import annotations

from ..cost.estimator import PlanEstimator
from ..cost.specs import shard_spec
from ..domain import Plan, Shard, TableSharding, Task
from .base import Searcher, register
from .placement import MemoryLedger, goes_whole, whole_on


def solo_costs(task: Task, estimator: PlanEstimator) -> dict[str, float]:
    """Each table's predicted fwd+bwd compute alone on one rank."""
    sets = [[shard_spec(task, t, "table_wise", Shard(0, 0, t.num_embeddings, 0, t.embedding_dim))]
            for t in task.tables]
    return {t.name: f + b for t, (f, b) in zip(task.tables, estimator.rank_compute(sets))}


@register
class GreedyCostSearcher(Searcher):
    name = "greedy-cost"
    description = "tables by descending predicted cost, each to the rank that keeps the predicted plan cost lowest"

    def search(self, task: Task, estimator: PlanEstimator, seed: int) -> list[TableSharding]:
        ledger = MemoryLedger(task)
        placed = ledger.place_fixed(task.tables)
        cost = solo_costs(task, estimator)
        for table in sorted((t for t in task.tables if goes_whole(t)), key=lambda t: (-cost[t.name], t.name)):
            candidates = ledger.whole_ranks(table)
            if not candidates:
                placed.append(ledger.place_spread(table))
                continue
            best = min(candidates, key=lambda r: self._score(task, estimator, placed + [whole_on(table, r)], r))
            placed.append(ledger.place_whole(table, best))
        return placed

    @staticmethod
    def _score(task: Task, estimator: PlanEstimator, tables: list[TableSharding], rank: int) -> tuple:
        c = estimator.estimate(Plan(task=task, tables=tuple(tables)))
        return (c.max_ms, c.mean_ms, rank)
