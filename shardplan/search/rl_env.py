"""The placement environment the RL searcher learns in (AutoShard / DreamShard style).

An episode places a task's units one at a time, in descending order of
predicted cost. Units are whole tables, except that a table too large for one
rank is first cut into column blocks, or row-wise, as the NeuroShard searchers
start; with ``hot_share``, a table predicted to cost more than that share of a
rank's fair share is cut into column blocks too
(:func:`~shardplan.search.neuroshard.hot_split_state`), or, with ``spread``, spread over ranks by rows
(:func:`~shardplan.search.neuroshard.hot_spread_state`), and, as a choice of its own, the tables much
wider than a rank's share of the columns. The observation for a step is one feature
row per rank, built from the learned cost model: the rank's predicted cost now
and if it takes the unit (the fused-kernel prediction, via the model's
incremental sums), its memory and summed dims (what its all-to-all moves)
after taking it, and the unit's own size. Every feature is a ratio to the
task's own scale, so one policy serves any number of tables and ranks and any
batch size. Ranks the unit would overflow are masked, and so are ranks after
which the later units could not all be packed: the environment keeps a packing
of every unit in hand (best-fit decreasing from the start) and offers a rank
only where that packing, or a fresh one of the units left, still holds. An
episode therefore never strands a large unit that comes late in cost order. At
the end the reward is minus the predicted plan cost (compute + comm) over a
lower bound.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..cost.estimator import PlanEstimator
from ..domain import Plan, TableSharding, Task
from ..memory import capacity_bytes
from .neuroshard import HOT_SHARE, _initial_state, _materialise, hot_split_state, hot_spread_state, wide_split_state
from .placer import Placer, Unit

RANK_FEATURES = ("cost_now", "cost_after", "after_minus_max_now", "after_minus_min_after", "mem_after",
                 "dims_after", "count_after", "unit_cost", "unit_mem", "progress")


class PlacementEnv:
    """One task's placement episode over the predicted costs of ``estimator``."""

    def __init__(self, task: Task, estimator: PlanEstimator, hot_share: float | None = None,
                 placer: Placer | None = None, wide: bool = False, spread: bool = False) -> None:
        """``placer``: one already made for this task and estimator, to reuse its shard encodings
        (the rl searcher builds an episode per split choice of the same task). ``wide``: also cut the
        tables much wider than a rank's share of the columns (:func:`~.neuroshard.wide_split_state`).
        ``spread``: first spread the hot tables by rows (:func:`~.neuroshard.hot_spread_state`, at
        ``hot_share``, else :data:`~.neuroshard.HOT_SHARE`); the hot tables left whole are then cut
        as ``hot_share`` says."""
        self.task = task
        self.est = estimator
        self.placer = placer or Placer(task, estimator)
        state = _initial_state(task)
        if spread:
            state = hot_spread_state(task, state, self.placer, HOT_SHARE if hot_share is None else hot_share)
        if hot_share is not None:
            state = hot_split_state(task, state, self.placer, hot_share)
        if wide:
            state = wide_split_state(task, state)
        self.state = state  # how each table is cut into the episode's units
        units, self.fixed = _materialise(task, state)
        codes, times, need = self.placer.unit_inputs(units)
        solo = times.sum(axis=1)
        order = sorted(range(len(units)), key=lambda i: (-solo[i], units[i].table.name))
        self.units: list[Unit] = [units[i] for i in order]
        self.codes, self.times, self.solo, self.need = codes[order], times[order], solo[order], need[order]
        self.world = task.topology.world_size
        self.cap = capacity_bytes(task)
        self.scale = max(float(self.solo.sum()) / self.world, 1e-6)  # the ideal per-rank compute
        self.dim_scale = max(sum(u.num_cols for u in self.units) / self.world, 1.0)
        self._start = self.placer.fixed_sums(self.fixed)  # row-wise slices sit on every rank from the start
        self.reset()

    def reset(self) -> "PlacementEnv":
        self.code_sum, self.time_sum, self.count, self.mem, self.dims, self.apart = (a.copy() for a in self._start)
        self.rank_ms = self.placer.ms(self.code_sum, self.time_sum, self.count, self.apart)
        self.where = np.full(len(self.units), -1)
        self.step_index = 0
        self.overflowed = False
        # Each unit's rank in a packing of all of them that respects memory; None where best-fit
        # decreasing finds none (then a rank is masked only when full, and an overflow is penalised).
        self.packing = self._pack(self.mem, range(len(self.units)), np.full(len(self.units), -1))
        self._repacked: dict[int, np.ndarray] = {}
        return self

    @property
    def done(self) -> bool:
        return self.step_index >= len(self.units)

    def observe(self) -> tuple[np.ndarray, np.ndarray]:
        """Features ``[world, len(RANK_FEATURES)]`` for placing the next unit, and the feasible-rank mask."""
        i = self.step_index
        after = self.placer.ms(self.code_sum + self.codes[i], self.time_sum + self.times[i], self.count + 1,
                               self.apart)
        mask = self._safe_ranks(i)
        if not mask.any():  # no packing was found at the start: let it overflow the emptiest rank, and penalise
            self.overflowed = True
            mask = self.mem == self.mem.min()
        s = self.scale
        n = len(self.units)
        feats = np.stack([
            self.rank_ms / s, after / s, (after - self.rank_ms.max()) / s, (after - after[mask].min()) / s,
            (self.mem + self.need[i]) / self.cap, (self.dims + self.units[i].num_cols) / self.dim_scale,
            (self.count + 1) / (n / self.world), np.full(self.world, self.solo[i] / s),
            np.full(self.world, self.need[i] / self.cap), np.full(self.world, i / n)], axis=1)
        self._after = after
        return feats.astype(np.float32), mask

    def _safe_ranks(self, i: int) -> np.ndarray:
        """Ranks that can take unit ``i`` and after which every later unit still has a place.

        A rank passes if the packing in hand holds with unit ``i`` moved there (one bincount), or
        else if best-fit decreasing packs the later units around it (that packing is kept for
        :meth:`step`). The packing's own rank for the unit always passes, so a packing in hand at
        the start carries through the whole episode. (On 2026-11-23 ``cpu-bench-24``, whose units of
        494 and 492 MiB for ranks of 499 MiB come late in cost order, stranded one in all 18 of the
        policy's episodes when only tight steps looked ahead.)"""
        fits = self.mem + self.need[i] <= self.cap
        self._repacked = {}
        if self.packing is None:
            return fits
        later = np.bincount(self.packing[i + 1:], weights=self.need[i + 1:], minlength=self.world)
        safe = fits & (self.mem + self.need[i] + later <= self.cap)
        for rank in np.flatnonzero(fits & ~safe):
            mem = self.mem.copy()
            mem[rank] += self.need[i]
            rest = self._pack(mem, range(i + 1, len(self.units)), self.packing)
            if rest is not None:
                safe[rank] = True
                self._repacked[int(rank)] = rest
        return safe

    def _pack(self, mem: np.ndarray, units: Sequence[int], base: np.ndarray) -> np.ndarray | None:
        """A copy of ``base`` with ranks for ``units`` filled in by best-fit decreasing on top of
        ``mem``, or None where one of them fits nowhere."""
        packing, mem = base.copy(), mem.copy()
        order = sorted(units, key=lambda u: -self.need[u])
        left = float(sum(self.need[u] for u in order))
        for k, u in enumerate(order):
            free = self.cap - mem
            if left <= free.max():  # all that is left fits on the roomiest rank together
                packing[order[k:]] = int(np.argmax(free))
                return packing
            fits = np.flatnonzero(free >= self.need[u])
            if not len(fits):
                return None
            rank = fits[np.argmin(free[fits])]
            mem[rank] += self.need[u]
            packing[u] = rank
            left -= float(self.need[u])
        return packing

    def step(self, rank: int) -> None:
        i = self.step_index
        self.code_sum[rank] += self.codes[i]
        self.time_sum[rank] += self.times[i]
        self.count[rank] += 1
        self.mem[rank] += self.need[i]
        self.dims[rank] += self.units[i].num_cols
        self.rank_ms[rank] = self._after[rank]
        self.where[i] = rank
        if self.packing is not None:
            self.packing = self._repacked.get(rank, self.packing)
            self.packing[i] = rank
        self.step_index += 1

    def tables(self) -> list[TableSharding]:
        return self.placer.shardings(self.units, self.where, self.fixed)

    def plan_cost(self) -> float:
        """The finished plan's predicted cost (slowest rank's compute + comm), ms; doubled when the
        episode overflowed a rank's memory (such a plan is never returned, only learned from)."""
        cost = self.est.estimate(Plan(task=self.task, tables=tuple(self.tables()))).max_ms
        return 2.0 * cost if self.overflowed else cost

    def refine(self) -> None:
        """The grid search's local improvement: move tables off the predicted-slowest rank while it helps."""
        if len(self.units):
            self.placer.refine(self.units, self.where, self.codes, self.times, self.need,
                               (self.code_sum, self.time_sum, self.count, self.apart), self.mem)
