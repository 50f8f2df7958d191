"""Pairwise local search that finishes a plan: move or swap one placement unit between two ranks.

The greedy placement and its refinement only move units off the slowest rank,
one at a time. They stall where the rank that could take work has no memory
left because it holds large but cheap tables: the slowest rank's units fit
nowhere useful, although swapping a cheap large table off the light rank for
a costly small one from a busy rank would free the room. :func:`polish` looks
at every pair of a busy rank and a lighter one, for every move of a unit
(whole table or column block) from the busy rank to the light one and every
swap of two units between them, and accepts a change when the full predicted
per-rank costs (compute from the learned model, comm from the comm model),
sorted from the slowest rank down, become lexicographically smaller. A change
that relieves the second-slowest rank is therefore progress even while the
slowest rank is stuck, and every accepted change strictly improves the sorted
costs, so the search cannot cycle.

Candidates are ranked by a cheap estimate (the model's incremental sums for
compute; comm linear in the rank's embedding columns, its slope fitted to the
plan's own ranks); the best few are checked with the full estimator before
one is accepted. Row-wise, table-row-wise and data-parallel tables stay where
they are.
"""
from __future__ import annotations

import numpy as np

from ..cost.estimator import PlanEstimator
from ..domain import Plan, TableSharding, Task
from .placement import merge_colocated_blocks
from .placer import Placer, Unit

#: A change must lower a rank's predicted cost by this fraction to count (sorting noise is not progress).
TOLERANCE = 1e-3
#: Busy ranks whose moves and swaps are tried each step (the slowest first).
BUSY_RANKS = 8
#: Candidates checked with the full estimator per step before giving up.
VERIFY = 6
#: Polish passes at most: a pass that leaves two blocks of a table on one rank is joined and polished again.
MERGE_ROUNDS = 3
#: :func:`polished_candidates` polishes every candidate plan up to this many movable units, and beyond it
#: only the one predicted fastest before polishing: a polish's work grows with units times ranks
#: (856 tables on 128 ranks: about 17 s per candidate plan on this 2-core machine).
POLISH_ALL_MAX_UNITS = 256


def _lex_smaller(new: np.ndarray, old: np.ndarray) -> bool:
    """Whether ``new`` per-rank costs, sorted descending, are lexicographically below ``old``'s: some rank
    drops by more than :data:`TOLERANCE` and none sorted before it rises at all (so the plan cost never
    rises and no sequence of changes can cycle)."""
    for x, y in zip(np.sort(new)[::-1], np.sort(old)[::-1]):
        if x < y * (1 - TOLERANCE):
            return True
        if x > y:
            return False
    return False


def _units(task: Task, tables: list[TableSharding]) -> tuple[list[Unit], np.ndarray, list[TableSharding]]:
    """The movable units of ``tables`` (table-wise and column-wise shards), their ranks, and the rest."""
    units, where, fixed = [], [], []
    for ts in tables:
        if ts.sharding_type not in ("table_wise", "column_wise"):
            fixed.append(ts)
            continue
        t = task.table(ts.name)
        for sh in ts.shards:
            units.append(Unit(t, sh.col_offset, sh.num_cols, len(ts.shards)))
            where.append(sh.rank)
    return units, np.array(where, dtype=int), fixed


class _State:
    """A plan under local search: where each unit sits, per-rank model sums, and the full predicted costs."""

    def __init__(self, placer: Placer, units: list[Unit], where: np.ndarray, fixed: list[TableSharding],
                 scale: np.ndarray | None = None) -> None:
        self.placer, self.units, self.fixed = placer, units, fixed
        # Per-rank factor on the model's compute (1 everywhere unless measurements corrected it).
        self.scale = np.ones(placer.world) if scale is None else np.asarray(scale, float)
        self.codes, self.times, self.need = placer.unit_inputs(units)
        self.cols = np.array([u.num_cols for u in units], float)
        self.base = placer.fixed_sums(fixed)  # what the fixed tables put on each rank; never changes
        self.set_where(where)

    def moved(self, unit: int, other: int) -> "_State":
        """A copy with ``unit`` moved to rank ``-1 - other`` (``other < 0``) or swapped with unit ``other``."""
        where = self.where.copy()
        if other < 0:
            where[unit] = -1 - other
        else:
            where[unit], where[other] = where[other], where[unit]
        out = object.__new__(_State)
        out.__dict__.update(self.__dict__)
        out.set_where(where)
        return out

    def set_where(self, where: np.ndarray) -> None:
        p = self.placer
        self.where = where
        self.code_sum, self.time_sum, self.count, self.mem, fixed_cols, self.apart = (x.copy() for x in self.base)
        np.add.at(self.code_sum, where, self.codes)
        np.add.at(self.time_sum, where, self.times)
        np.add.at(self.count, where, 1)
        np.add.at(self.mem, where, self.need)
        self.rank_cols = fixed_cols + np.bincount(where, self.cols, minlength=p.world)
        self.tables = p.shardings(self.units, where, self.fixed)
        cost = p.est.estimate(Plan(task=p.task, tables=tuple(self.tables)))
        self.comm = np.array([r.comm_ms for r in cost.per_rank])
        self.total = self.scale * np.array([r.compute_ms for r in cost.per_rank]) + self.comm
        # Comm per rank is close to linear in the rank's columns (what it sends); fit the slope here.
        x = self.rank_cols - self.rank_cols.mean()
        self.kappa = float(x @ (self.comm - self.comm.mean()) / (x @ x)) if (x @ x) > 0 else 0.0

    def candidates(self, a: int) -> list[tuple[float, int, int]]:
        """(estimated cost of the pair, unit on ``a``, partner) of changes that relieve busy rank ``a``,
        best first; the partner is a unit to swap with, or ``-1 - rank`` for a move to that rank."""
        p, cap = self.placer, self.placer.cap
        bar = self.total[a] * (1 - TOLERANCE)  # what the pair's slower rank must get under
        mine = np.flatnonzero(self.where == a)
        lighter = np.flatnonzero(self.total < bar)
        if len(mine) == 0 or len(lighter) == 0:
            return []
        out: list[tuple[float, int, int]] = []
        n = len(mine)
        # Moves: unit u from a to a lighter rank b.
        a_minus, b_plus = p.move_costs((self.code_sum, self.time_sum, self.count, self.apart), self.codes[mine],
                                       self.times[mine], a, lighter)
        sa, sb = self.scale[a], self.scale[lighter]
        a_after = sa * a_minus + self.comm[a] - self.kappa * self.cols[mine]
        b_after = sb[None] * b_plus + self.comm[lighter][None] + self.kappa * self.cols[mine][:, None]
        pair = np.maximum(a_after[:, None], b_after)
        pair[self.mem[lighter][None] + self.need[mine][:, None] > cap] = np.inf
        out += [(float(pair[k, j]), int(mine[k]), -1 - int(lighter[j])) for k, j in zip(*np.nonzero(pair < bar))]
        # Swaps: unit u on a for unit v on a lighter rank b.
        theirs = np.flatnonzero(np.isin(self.where, lighter))
        if len(theirs):
            b, v = self.where[theirs], len(theirs)
            dc = self.codes[theirs][None] - self.codes[mine][:, None]  # [n, v]: v into a, u out of a
            dt = self.times[theirs][None] - self.times[mine][:, None]
            dcols = self.cols[theirs][None] - self.cols[mine][:, None]
            a_sw = p.ms((self.code_sum[a] + dc).reshape(n * v, -1), (self.time_sum[a] + dt).reshape(n * v, -1),
                        np.full(n * v, self.count[a]), np.full(n * v, self.apart[a])).reshape(n, v)
            b_sw = p.ms((self.code_sum[b][None] - dc).reshape(n * v, -1),
                        (self.time_sum[b][None] - dt).reshape(n * v, -1),
                        np.tile(self.count[b], n), np.tile(self.apart[b], n)).reshape(n, v)
            pair = np.maximum(sa * a_sw + self.comm[a] + self.kappa * dcols,
                              self.scale[b][None] * b_sw + self.comm[b][None] - self.kappa * dcols)
            dneed = self.need[theirs][None] - self.need[mine][:, None]
            pair[(self.mem[a] + dneed > cap) | (self.mem[b][None] - dneed > cap)] = np.inf
            out += [(float(pair[k, j]), int(mine[k]), int(theirs[j])) for k, j in zip(*np.nonzero(pair < bar))]
        out.sort()
        return out

    def improved(self) -> "_State | None":
        """The first checked change that makes the sorted per-rank costs smaller, busiest rank first."""
        for a in np.argsort(-self.total, kind="stable")[:BUSY_RANKS]:
            for _, unit, other in self.candidates(int(a))[:VERIFY]:
                trial = self.moved(unit, other)
                if _lex_smaller(trial.total, self.total):
                    return trial
        return None


def polish(task: Task, estimator: PlanEstimator, tables: list[TableSharding], placer: Placer | None = None,
           max_steps: int | None = None, rank_scale: np.ndarray | None = None) -> list[TableSharding]:
    """``tables`` improved by single-unit moves and pairwise swaps (see the module docstring).

    Column blocks of one table that share a rank are joined first and after every pass
    (:func:`~.placement.merge_colocated_blocks`: measured, that is always faster, whatever the model
    says), and a pass that joined any is followed by another, at most :data:`MERGE_ROUNDS` in all.
    Deterministic; apart from joining blocks, never returns a plan predicted slower than the one given.
    At most ``max_steps`` changes a pass (default: twice the units, plus 10).
    ``rank_scale`` multiplies each rank's predicted compute (a rank's measured-over-predicted
    factor, :mod:`.refine`); the factor stays with the rank as units move on and off it.
    """
    placer = placer or Placer(task, estimator)
    tables = merge_colocated_blocks(task, tables)
    for _ in range(MERGE_ROUNDS):
        units, where, fixed = _units(task, tables)
        if len(units) < 2 or task.topology.world_size < 2:
            return tables
        state = _State(placer, units, where, fixed, rank_scale)
        for _ in range(max_steps if max_steps is not None else 2 * len(units) + 10):
            better = state.improved()
            if better is None:
                break
            state = better
        merged = merge_colocated_blocks(task, state.tables)
        if merged == state.tables:
            return merged
        tables = merged  # a block moved beside its sibling: joined, the rank is lighter; polish again
    return tables


def polished_candidates(task: Task, estimator: PlanEstimator, candidates: list[list[TableSharding]],
                        placer: Placer | None = None) -> list[list[TableSharding]]:
    """Each candidate polished, predicted fastest first (the earlier on a tie). Past
    :data:`POLISH_ALL_MAX_UNITS` movable units, only the candidate predicted fastest is polished and returned."""
    placer = placer or Placer(task, estimator)
    if len(candidates) > 1 and len(_units(task, candidates[0])[0]) > POLISH_ALL_MAX_UNITS:
        candidates = cheapest_first(task, estimator, candidates)[:1]
    polished = [polish(task, estimator, c, placer) for c in candidates]
    return cheapest_first(task, estimator, polished)


def cheapest_first(task: Task, estimator: PlanEstimator, plans: list[list[TableSharding]]) -> list[list[TableSharding]]:
    """``plans`` by predicted plan cost, the earlier first on a tie (one plan: as it is, not estimated)."""
    if len(plans) <= 1:
        return plans
    costs = [estimator.estimate(Plan(task=task, tables=tuple(p))).max_ms for p in plans]
    return [plans[i] for i in sorted(range(len(plans)), key=lambda i: (costs[i], i))]

