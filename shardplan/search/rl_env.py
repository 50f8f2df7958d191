"""The placement environment the RL searcher learns in (AutoShard / DreamShard style).

An episode places a task's units one at a time, in descending order of
predicted cost. Units are whole tables, except that a table too large for one
rank is first cut into column blocks, or row-wise, as the NeuroShard searchers
start; with ``hot_share``, a table predicted to cost more than that share of a
rank's fair share is cut into column blocks too
(:func:`~shardplan.search.neuroshard.hot_split_state`). The observation for a step is one feature
row per rank, built from the learned cost model: the rank's predicted cost now
and if it takes the unit (the fused-kernel prediction, via the model's
incremental sums), its memory and summed dims (what its all-to-all moves)
after taking it, and the unit's own size. Every feature is a ratio to the
task's own scale, so one policy serves any number of tables and ranks and any
batch size. Ranks the unit would overflow are masked. At the end the reward is
minus the predicted plan cost (compute + comm) over a lower bound.
"""
from __future__ import annotations

import numpy as np

from ..cost.estimator import PlanEstimator
from ..domain import Plan, TableSharding, Task
from ..memory import capacity_bytes
from .neuroshard import _initial_state, _materialise, hot_split_state
from .placer import Placer, Unit

RANK_FEATURES = ("cost_now", "cost_after", "after_minus_max_now", "after_minus_min_after", "mem_after",
                 "dims_after", "count_after", "unit_cost", "unit_mem", "progress")


class PlacementEnv:
    """One task's placement episode over the predicted costs of ``estimator``."""

    def __init__(self, task: Task, estimator: PlanEstimator, hot_share: float | None = None,
                 placer: Placer | None = None) -> None:
        """``placer``: one already made for this task and estimator, to reuse its shard encodings
        (the rl searcher builds an episode per split choice of the same task)."""
        self.task = task
        self.est = estimator
        self.placer = placer or Placer(task, estimator)
        state = _initial_state(task)
        if hot_share is not None:
            state = hot_split_state(task, state, self.placer, hot_share)
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
        return self

    @property
    def done(self) -> bool:
        return self.step_index >= len(self.units)

    def observe(self) -> tuple[np.ndarray, np.ndarray]:
        """Features ``[world, len(RANK_FEATURES)]`` for placing the next unit, and the feasible-rank mask."""
        i = self.step_index
        after = self.placer.ms(self.code_sum + self.codes[i], self.time_sum + self.times[i], self.count + 1,
                               self.apart)
        mask = self.mem + self.need[i] <= self.cap
        if mask.any() and self._tight(i):  # keep only ranks after which the rest still packs
            safe = np.array([m and self._rest_packs(i, r) for r, m in enumerate(mask)])
            if safe.any():
                mask = safe
        if not mask.any():  # earlier steps packed badly: let it overflow the emptiest rank, and penalise
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

    def _tight(self, i: int) -> bool:
        """Whether the units from ``i`` on need over half the memory left: the cheap gate for the
        look-ahead, which is where a free choice of rank now tends to leave a later unit nowhere to go
        (on 2026-11-22 every plan of a retrained policy overflowed on ``cpu-bench-06`` without it)."""
        return float(self.need[i:].sum()) > 0.5 * float((self.cap - self.mem).clip(min=0).sum())

    def _rest_packs(self, i: int, rank: int) -> bool:
        """Whether, with unit ``i`` on ``rank``, the later units fit by best-fit decreasing."""
        mem = self.mem.copy()
        mem[rank] += self.need[i]
        for need in sorted(self.need[i + 1:], reverse=True):
            free = self.cap - mem - need
            fits = np.flatnonzero(free >= 0)
            if not len(fits):
                return False
            mem[fits[np.argmin(free[fits])]] += need
        return True

    def step(self, rank: int) -> None:
        i = self.step_index
        self.code_sum[rank] += self.codes[i]
        self.time_sum[rank] += self.times[i]
        self.count[rank] += 1
        self.mem[rank] += self.need[i]
        self.dims[rank] += self.units[i].num_cols
        self.rank_ms[rank] = self._after[rank]
        self.where[i] = rank
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
