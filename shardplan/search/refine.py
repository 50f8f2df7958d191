"""Measured refinement: correct the model's per-rank error with real timings of the plan, then polish again.

The learned model is a few percent off on any one rank (7-9% on held-out
plan ranks), and a searcher that balances predicted ranks turns each rank's
error straight into imbalance: the measured slowest rank of a balanced plan is
the one the model underestimated most. Where the plan's hardware is at hand,
:func:`refine` times the plan's ranks, takes each rank's measured-over-
predicted compute relative to the plan's geometric mean (so only the ranks'
differences count, not the machine's level, which a busy host moves), and
polishes the plan again (:func:`~.polish.polish`) with the model's compute on
each rank multiplied by that factor. A factor describes the bulk of a rank's
tables and a polish moves only a few units, so the new plan is timed again
and the loop repeats. A rank's set of shards timed more than once keeps the
geometric mean of its factors, which averages its timing noise down.

A searcher's runners-up (the NeuroShard beam's other polished plans, close to
its pick in predicted cost) may come along: they are timed together with the
pick first, and the loop starts from the one measured fastest, since the
model's error is as large as the predicted gaps between them. Every plan
visited is finally timed together in one interleaved call, and the one
measured fastest (slowest rank's compute plus the comm model's comm) is
returned; the plan given is among them. The result depends on timings, so
unlike the searchers it is not a function of the seed alone: the ``search``
block records every factor and timing that chose it.
"""
from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Callable, Sequence

import numpy as np

from ..cost.estimator import PlanEstimator
from ..cost.specs import canonical, rank_specs
from ..domain import Plan, Task
from ..errors import InputError
from .base import Searcher, in_task_order
from .polish import polish

#: Times plans' ranks on real kernels, interleaved: per plan, each rank's compute (fwd + bwd) in ms.
RankTimer = Callable[[list[Plan]], list[np.ndarray]]


def measuring_timer(profile: str, rounds: int = 2, visits: int = 4) -> RankTimer:
    """A :data:`RankTimer` on this machine's FBGEMM kernels (:func:`~shardplan.execute.measure.measure_plans`)."""
    from ..cost.profiles import get_profile
    from ..execute.measure import measure_plans

    if get_profile(profile).device != "cpu":
        # measure_plans has only been run on CPU kernels; a GPU's ranks are timed by the lease's own stages
        raise InputError("profile", f"{profile!r} is a GPU profile, and measured refinement times CPU ranks only",
                         "plan without --refine")

    def timer(plans: list[Plan]) -> list[np.ndarray]:
        return [np.array([r.compute_ms for r in c.per_rank])
                for c in measure_plans(plans, profile, rounds=rounds, visits=visits)]
    return timer


def _rank_keys(plan: Plan) -> list[tuple]:
    return [canonical(specs) for specs in rank_specs(plan)]


def _measured_max(plans: list[Plan], estimator: PlanEstimator, timer: RankTimer) -> list[float]:
    """Each plan's measured cost, timed together: slowest rank's compute plus the comm model's comm."""
    comm = [np.array([r.comm_ms for r in estimator.estimate(p).per_rank]) for p in plans]
    return [float((m + c).max()) for m, c in zip(timer(plans), comm)]


def refine(plan: Plan, estimator: PlanEstimator, timer: RankTimer, iterations: int = 3,
           moves: int | None = None, alternatives: Sequence[Plan] = ()) -> Plan:
    """``plan`` re-polished against measured per-rank factors (module docstring); the fastest measured.

    ``alternatives`` (a searcher's runners-up, :meth:`~.base.Searcher.plan_shortlist`) are
    first timed together with ``plan``, and the loop starts from the one measured fastest.
    ``iterations`` timings of a plan, each followed by a polish of at most ``moves`` changes
    (default: twice the ranks); the loop stops early when a polish changes nothing.
    """
    if iterations < 1:
        raise InputError("iterations", f"must be at least 1, got {iterations}")
    t0 = time.perf_counter()
    task = plan.task
    world = task.topology.world_size
    factors: dict[tuple, list[float]] = {}  # a rank's shard set -> its relative factors so far
    visited: list[Plan] = [plan]
    for alt in alternatives:
        if alt.task != task:
            raise InputError("alternatives", "hold a plan of another task", "pass plans of the same task")
        if all(alt.tables != p.tables for p in visited):
            visited.append(alt)
    starts = len(visited)
    first = _measured_max(visited, estimator, timer) if starts > 1 else None
    current = visited[int(np.argmin(first))] if first else plan
    steps: list[dict] = []
    for _ in range(iterations):
        measured = timer([current])[0]
        predicted = np.array([r.compute_ms for r in estimator.estimate(current).per_rank])
        busy = (measured > 0) & (predicted > 0)
        ratio = np.ones(world)
        ratio[busy] = measured[busy] / predicted[busy]
        level = math.exp(float(np.log(ratio[busy]).mean())) if busy.any() else 1.0
        keys = _rank_keys(current)
        for r in np.flatnonzero(busy):
            factors.setdefault(keys[r], []).append(float(ratio[r] / level))
        scale = np.array([math.exp(float(np.mean(np.log(factors[k])))) if k in factors else 1.0 for k in keys])
        steps.append({"measured_compute_ms": [round(float(x), 3) for x in measured],
                      "predicted_compute_ms": [round(float(x), 3) for x in predicted],
                      "factor": [round(float(x), 4) for x in scale]})
        tables = polish(task, estimator, list(current.tables), max_steps=2 * world if moves is None else moves,
                        rank_scale=scale)
        nxt = in_task_order(task, tables)
        if any(nxt.tables == p.tables for p in visited):
            break
        visited.append(nxt)
        current = nxt
    if len(visited) == 1:
        chosen, final = 0, None
    else:
        final = _measured_max(visited, estimator, timer)
        chosen = int(np.argmin(final))
    best = visited[chosen]
    record = {"seconds": round(time.perf_counter() - t0, 2), "alternatives": starts - 1,
              "first_measured_ms": None if first is None else [round(x, 3) for x in first],
              "iterations": steps, "candidates": len(visited), "chosen": chosen,
              "final_measured_ms": None if final is None else [round(x, 3) for x in final]}
    search = dict(plan.search or {})
    search["refine"] = record
    return replace(best, cost=estimator.estimate(best), measured_cost=None, search=search)


def plan_refined(searcher: Searcher, task: Task, estimator: PlanEstimator, profile: str, seed: int = 0,
                 iterations: int = 3) -> Plan:
    """``searcher``'s shortlist of ``task``, refined on this machine's kernels: its pick with the
    runners-up as alternatives (what ``--refine N`` and ``shardplan.plan(refine=N)`` do)."""
    if iterations < 1:
        raise InputError("iterations", f"must be at least 1, got {iterations}")
    timer = measuring_timer(profile)  # refuses a profile whose hardware is not here, before any planning
    plans = searcher.plan_shortlist(task, estimator, seed)
    return refine(plans[0], estimator, timer, iterations=iterations, alternatives=plans[1:])
