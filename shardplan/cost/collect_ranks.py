"""Whole-rank cost data: the ranks of real plans, timed on real FBGEMM kernels.

Random shard sets (:mod:`shardplan.cost.collect`) teach the model what single
shards and small mixes cost; a planner's ranks are another population: more
shards, more memory, the mixes that searchers actually build. DreamShard's
remedy is to measure the plans that searchers produce and learn from them too.
:func:`collect_plan_ranks` plans every task of a suite with several searchers
and times every rank exactly as the random collector times a sample (the
reference workload just before and after, the profile's protocol), appending
rows of the same shape to ``data/profiles/<profile>/compute-ranks.parquet``
(``source = "plan-rank"``, plus ``task``, ``searcher`` and ``rank``).

:func:`collect_carried_plan_ranks` times the ranks of plans made elsewhere
(plan files) the same way: a lent GPU machine has no TorchRec to plan with.

All ranks of a task share one ``sample`` number, so the train/held-out split
(:func:`shardplan.cost.split.is_holdout`) holds out whole tasks. Resumable:
(task, searcher, round) triples already in the file are skipped.

By default a rank is timed again while the reference shows the machine more
than ``kernel.QUIET_TOLERANCE`` slower than quiet. On a machine that stays
1.5-2x slow for hours that gate retries every rank and keeps a disturbed one
anyway; ``wait_fit_s > 0`` gates on the fitness probe instead
(:mod:`shardplan.cost.fitness`: before each plan, stored labels must re-time
within ``LABEL_TOLERANCE``, waiting up to ``wait_fit_s`` for that) and then
accepts a steady slowdown up to ``kernel.MEASURE_SLOW_LIMIT``, as the probe
does. Each row records the gate it passed (``slow_limit``, and the
probe's ``fit_label_ratio`` / ``fit_reference`` / ``fit_tilt``).
"""
from __future__ import annotations

import datetime as _dt
import zlib
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
from tqdm import tqdm

from ..domain import Plan, Task
from ..errors import InfeasibleError
from ..formats import load_plan, load_task
from .collect import _stamp, append_rows, quiet_reference_ms, spec_columns, timed_row
from .estimator import PlanEstimator
from .fitness import wait_until_fit
from .kernel import MEASURE_SLOW_LIMIT, QUIET_TOLERANCE
from .profiles import Profile
from .specs import rank_specs

if TYPE_CHECKING:
    from ..search.base import Searcher

RANKS_SEED = 7  # the `seed` column of plan-rank rows (random samples use the collector's seeds)


def task_sample(task_name: str) -> int:
    return zlib.crc32(task_name.encode()) & 0x7FFFFFFF


def _existing(out: Path) -> pd.DataFrame:
    """The rows already in ``out`` (none if it does not exist); files written before rounds were
    recorded are round 0."""
    existing = pd.read_parquet(out) if out.exists() else pd.DataFrame()
    if len(existing) and "round" not in existing:
        existing["round"] = 0
    return existing


def _resume(profile: Profile, out: Path) -> tuple[pd.DataFrame, set[tuple[str, str, int]], float]:
    """What a plan-rank collector starts from: the rows ``out`` holds, the (task, searcher, round) they
    cover (skipped on a resume), and the quiet machine's reference time; with the profile's threads set
    and ``out``'s folder made."""
    profile.use_threads()
    existing = _existing(out)
    done = set(zip(existing["task"], existing["searcher"], existing["round"])) if len(existing) else set()
    out.parent.mkdir(parents=True, exist_ok=True)
    return existing, done, quiet_reference_ms(profile)


def _rank_rows(plan: Plan, searcher: str, profile: Profile, round_: int, quiet_ms: float, stamp: dict,
               wait_fit_s: float, wait_quiet_s: float) -> list[dict]:
    """Every non-empty rank of ``plan`` timed as the random collector times a sample (``wait_quiet_s`` as in
    :func:`.collect.timed_row`)."""
    task, gate = plan.task, {}
    if wait_fit_s > 0:
        fitness = wait_until_fit(profile, wait_fit_s)
        if fitness is not None:  # a profile with no stored ranks yet has nothing to probe with
            gate = fitness.columns()
    slow_limit = MEASURE_SLOW_LIMIT if gate else QUIET_TOLERANCE
    sample = task_sample(task.name)
    return [{"seed": RANKS_SEED, "sample": sample, "source": "plan-rank", "task": task.name, "searcher": searcher,
             "rank": rank, "round": round_,
             **timed_row(specs, task.optimizer, task.dtype, profile, sample + rank, profile.warmup, profile.repeats,
                         quiet_ms, slow_limit, wait_quiet_s=wait_quiet_s),
             **gate, **stamp}
            for rank, specs in enumerate(rank_specs(plan)) if specs]


def suite_task(path: Path, estimator: PlanEstimator) -> Task:
    """A training suite's task as the profile runs it: a suite gives the shapes (tables, topology, batch),
    the profile's cost data the optimizer and weight type every rank is timed with."""
    return replace(load_task(path), optimizer=estimator.optimizers[0], dtype=estimator.dtypes[0])


def searchers_named(names: list[str]) -> dict[str, Searcher]:
    """The searchers by name, looked up before anything is timed: an unknown name (or a policy that is
    missing) is bad input, not a task no searcher could plan."""
    from ..search import get_searcher

    return {name: get_searcher(name) for name in names}


def collect_plan_ranks(profile: Profile, task_paths: list[Path], searchers: list[str], estimator: PlanEstimator,
                       out: Path, round_: int = 0, wait_fit_s: float = 0.0,
                       wait_quiet_s: float = 0.0) -> pd.DataFrame:
    """Time the ranks of every (task, searcher) plan not yet in ``out`` for this ``round_``.

    A round is one pass of DreamShard's loop: plan with the current model, time,
    retrain; the next round's plans (by the retrained model) are new data."""
    chosen = searchers_named(searchers)
    existing, done, quiet_ms = _resume(profile, out)
    todo = [(p, s) for p in task_paths for s in searchers]
    stamp = _stamp(profile, estimator.optimizers[0], estimator.dtypes[0])
    for path, searcher in tqdm(todo, desc=f"collect plan ranks [{profile.name}]"):
        task = suite_task(path, estimator)
        if (task.name, searcher, round_) in done:
            continue
        try:
            plan = chosen[searcher].plan(task, estimator, seed=0)
        except InfeasibleError:  # infeasible for this searcher: nothing to time
            rows = [{"task": task.name, "searcher": searcher, "rank": -1, "source": "plan-rank-infeasible",
                     "round": round_}]
        else:
            rows = _rank_rows(plan, searcher, profile, round_, quiet_ms, stamp, wait_fit_s,
                              wait_quiet_s=wait_quiet_s)
        existing = append_rows(existing, rows, out)  # after every plan, so a stop loses at most one
    return existing


def collect_carried_plan_ranks(profile: Profile, plan_paths: list[Path], out: Path, round_: int = 0,
                               wait_fit_s: float = 0.0, wait_quiet_s: float = 0.0) -> pd.DataFrame:
    """Time the ranks of plans made elsewhere (plan files), as :func:`collect_plan_ranks` times its own.

    For a machine that cannot plan what it is to time: the lent GPU has no TorchRec, so its suite's plans
    are made on the CPU machine and carried; their ranks timed here by the collector's protocol are plan
    ranks of the GPU profile, the same population the emulated loop times its way. The searcher is the
    one each plan records. Resumable by (task, searcher, round)."""
    existing, done, quiet_ms = _resume(profile, out)
    stamps: dict[tuple[str, str], dict] = {}  # per optimizer and dtype: the stamp reads the machine
    for path in tqdm(plan_paths, desc=f"collect carried plan ranks [{profile.name}]"):
        plan = load_plan(path)
        searcher = str(plan.search.get("searcher", path.stem))
        if (plan.task.name, searcher, round_) in done:
            continue
        kind = (plan.task.optimizer, plan.task.dtype)
        if kind not in stamps:
            stamps[kind] = _stamp(profile, *kind)
        rows = _rank_rows(plan, searcher, profile, round_, quiet_ms, stamps[kind], wait_fit_s,
                          wait_quiet_s=wait_quiet_s)
        existing = append_rows(existing, rows, out)
    return existing


def collect_plan_groups(profile: Profile, task_paths: list[Path], searchers: list[str], estimator: PlanEstimator,
                        out: Path, rounds: int = 2, visits: int = 4, round_: int = 0) -> pd.DataFrame:
    """Time the plans of every task not yet in ``out`` for this ``round_`` together, as the bench measures them.

    A task's plans (one per searcher) go to :func:`shardplan.execute.measure.measure_plans` in one
    call: their ranks take turns visit by visit and every figure shares one divisor, so the ratio of
    any two ranks of the task is as exact as a bench comparison (2026-11-22: 3-4% run-to-run, sd of
    log) while the task's level rides on that divisor, which on a disturbed machine misses the
    kernels' slowdown by up to 30% (the fitness probe). Rows (``source = "plan-group"``, ``group`` =
    the task) are therefore for within-task relative timing: ``fwd_ms``/``bwd_ms`` are already
    divided by the call's ``slowdown``; there is no per-row reference. One task per call; resumable
    by task (a task that no searcher can plan leaves no row, and is planned again on a resume).

    A later ``round_`` (new plans, e.g. by a retrained model or other searchers) times the task again
    as a group of its own, ``<task>@<round>``: its divisor is not the earlier group's.
    """
    from ..execute.measure import measure_plans

    chosen = searchers_named(searchers)
    existing = _existing(out)
    done = set(existing["group"]) if len(existing) else set()
    stamp = _stamp(profile, estimator.optimizers[0], estimator.dtypes[0])
    out.parent.mkdir(parents=True, exist_ok=True)
    for path in tqdm(task_paths, desc=f"collect plan groups [{profile.name}, round {round_}]"):
        task = suite_task(path, estimator)
        group = task.name if round_ == 0 else f"{task.name}@{round_}"
        if group in done:
            continue
        plans = []
        for searcher in searchers:
            try:
                plans.append((searcher, chosen[searcher].plan(task, estimator, seed=0)))
            except InfeasibleError:  # infeasible for this searcher: nothing to time
                continue
        costs = measure_plans([p for _, p in plans], profile.name, rounds=rounds, visits=visits)
        rows = []
        for (searcher, plan), cost in zip(plans, costs):
            for rank, specs in enumerate(rank_specs(plan)):
                if not specs:
                    continue
                rc = cost.per_rank[rank]
                rows.append({"seed": RANKS_SEED, "sample": task_sample(task.name), "source": "plan-group",
                             "group": group, "task": task.name, "searcher": searcher, "rank": rank,
                             "round": round_,
                             **spec_columns(specs), "fwd_ms": rc.fwd_compute_ms,
                             "bwd_ms": rc.bwd_compute_ms, "slowdown": cost.extra["slowdown"],
                             "rounds_ms": cost.extra["rounds_compute_ms_per_rank"][rank],
                             "protocol": cost.extra["compute"], "rounds": rounds, "visits": visits,
                             "load1_before": cost.extra["load1_before"], "load1_after": cost.extra["load1_after"],
                             "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), **stamp})
        existing = append_rows(existing, rows, out)
    return existing
