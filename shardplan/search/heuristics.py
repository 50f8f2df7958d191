"""Baseline searchers of the literature: random, round-robin, and greedy by a hand cost.

The greedy ones are longest-processing-time-first: tables in descending order
of a hand-made cost, each whole on the rank whose summed hand cost is lowest
among ranks with memory left (AutoShard/DreamShard's baselines):

* ``size``: the table's bytes;
* ``dim``: its embedding dim;
* ``lookup``: dim x pooling factor (the floats a sample reads);
* ``size-lookup``: the product of the normalised size and lookup costs.

A table that fits no rank whole is split row-wise over all ranks (as every
searcher here does), and a task that cannot fit even so is an
:class:`~shardplan.errors.InfeasibleError`. A task's per-table sharding types
are honoured (:class:`~.placement.MemoryLedger`): a table no rank may hold
whole is spread first, as its types allow, and one allowed column-wise but not
table-wise goes whole as one column block.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..cost.estimator import PlanEstimator
from ..domain import TableSharding, Task, Table
from ..memory import table_bytes
from .base import Searcher, register
from .placement import MemoryLedger, goes_whole


def _lpt(task: Task, cost: Callable[[Table], float]) -> list[TableSharding]:
    ledger = MemoryLedger(task)
    load = [0.0] * task.topology.world_size

    def spread(ts: TableSharding) -> TableSharding:
        t = task.table(ts.name)
        for s in ts.shards:  # a replica serves the local batch: 1/world of the table's work
            load[s.rank] += cost(t) * (1 / len(load) if ts.sharding_type == "data_parallel"
                                       else s.num_rows / t.num_embeddings)
        return ts

    out = [spread(ts) for ts in ledger.place_fixed(task.tables)]
    for t in sorted((t for t in task.tables if goes_whole(t)), key=lambda t: (-cost(t), t.name)):
        ranks = ledger.whole_ranks(t)
        if not ranks:
            out.append(spread(ledger.place_spread(t)))
            continue
        r = min(ranks, key=lambda r: (load[r], r))
        load[r] += cost(t)
        out.append(ledger.place_whole(t, r))
    return out


def _greedy(name: str, doc: str, cost: Callable[[Task], Callable[[Table], float]]) -> type[Searcher]:
    class _Greedy(Searcher):
        def search(self, task: Task, estimator: PlanEstimator, seed: int) -> list[TableSharding]:
            return _lpt(task, cost(task))

    _Greedy.name, _Greedy.description = name, doc
    _Greedy.__name__ = _Greedy.__qualname__ = "Greedy" + name.title().replace("-", "")
    return register(_Greedy)


def _size_lookup(task: Task) -> Callable[[Table], float]:
    size = {t.name: t.num_embeddings * t.embedding_dim for t in task.tables}
    lookup = {t.name: t.embedding_dim * t.pooling_factor for t in task.tables}
    ms, ml = max(size.values()), max(lookup.values()) or 1.0
    return lambda t: (size[t.name] / ms) * (lookup[t.name] / ml)


_greedy("greedy-size", "LPT greedy by table bytes", lambda task: lambda t: float(table_bytes(task, t)))
_greedy("greedy-dim", "LPT greedy by embedding dim", lambda task: lambda t: float(t.embedding_dim))
_greedy("greedy-lookup", "LPT greedy by dim x pooling factor",
        lambda task: lambda t: t.embedding_dim * t.pooling_factor)
_greedy("greedy-size-lookup", "LPT greedy by normalised size x lookup", _size_lookup)

# The greedy baselines of the literature (issue 3's "best greedy baseline"); ``greedy-cost`` uses our
# learned model and is not one of them.
LITERATURE_GREEDY = ("greedy-size", "greedy-dim", "greedy-lookup", "greedy-size-lookup")


@register
class RandomSearcher(Searcher):
    name = "random"
    description = "each table whole on a random rank with memory left (seeded)"

    def search(self, task: Task, estimator: PlanEstimator, seed: int) -> list[TableSharding]:
        rng = np.random.default_rng(seed)
        ledger = MemoryLedger(task)
        out = ledger.place_fixed(task.tables)
        # Largest first, so that random choices rarely paint the big tables into a corner.
        for t in sorted((t for t in task.tables if goes_whole(t)), key=lambda t: (-table_bytes(task, t), t.name)):
            ranks = ledger.whole_ranks(t)
            out.append(ledger.place_whole(t, int(rng.choice(ranks))) if ranks else ledger.place_spread(t))
        return out


@register
class RoundRobinSearcher(Searcher):
    name = "round-robin"
    description = "tables in task order to ranks 0, 1, 2, ... (skipping full ranks)"

    def search(self, task: Task, estimator: PlanEstimator, seed: int) -> list[TableSharding]:
        ledger = MemoryLedger(task)
        world = len(ledger.used)
        out, nxt = ledger.place_fixed(task.tables), 0
        for t in (t for t in task.tables if goes_whole(t)):
            room = set(ledger.whole_ranks(t))
            ranks = [(nxt + k) % world for k in range(world) if (nxt + k) % world in room]
            if ranks:
                out.append(ledger.place_whole(t, ranks[0]))
                nxt = (ranks[0] + 1) % world
            else:
                out.append(ledger.place_spread(t))
        return out
