"""``shardplan bench``: every searcher on every task of a suite, every plan measured.

Per task: each searcher plans (predicted cost, planning seconds, validity, or
the reason it could not plan); then all the task's plans are measured on real
kernels together, interleaved (:func:`shardplan.execute.measure.measure_plans`),
so machine noise hits them alike. Comm comes from the profile's comm model in
both the predicted and the measured cost (it is not run here).

Writes ``<out>/<name>.csv`` (one row per task and searcher; the per-rank
measured and predicted compute as JSON lists) and
``<out>/<name>.md`` (the table, and per searcher the geometric mean of its
measured cost over TorchRec's, over the tasks TorchRec could plan).

Resumable: after every task the rows so far go to ``<out>/<name>.partial.csv``
beside a ``.partial.json`` of the run's settings; a run with the same settings
skips the tasks found there, and the partial files go once the results are
written.
"""
from __future__ import annotations

import datetime as dt
import functools
import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from ..cost.estimator import PlanEstimator
from ..cost.fit_gate import FitGate
from ..cost.fitness import LABEL_TOLERANCE, TILT_TOLERANCE, Fitness
from ..cost.kernel import MEASURE_SLOW_LIMIT, QUIET_TOLERANCE
from ..cost.profiles import get_profile, host_mismatch_note, load1, machine_stamp
from ..domain import Plan, Task
from ..errors import InputError
from ..formats import write_text_atomic
from ..search import get_searcher
from ..search.heuristics import LITERATURE_GREEDY
from ..validate import plan_problems
from .measure import measure_plans

REFERENCE = "torchrec"


def bench_task(task: Task, searchers: list[str], estimator: PlanEstimator, profile: str, rounds: int,
               seed: int = 0, visits: int = 1) -> tuple[list[dict], list[Plan]]:
    rows, plans = [], []
    for name in searchers:
        row = {"task": task.name, "tables": len(task.tables), "ranks": task.topology.world_size,
               "searcher": name}
        try:
            plan = get_searcher(name).plan(task, estimator, seed=seed)
        except InputError as e:
            rows.append({**row, "valid": False, "error": str(e)})
            continue
        problems = plan_problems(plan)
        rows.append({**row, "valid": not problems, "error": "; ".join(problems),
                     "predicted_ms": plan.cost.max_ms, "plan_seconds": plan.search["seconds"]})
        plans.append(plan)
    measured = measure_plans(plans, profile, rounds, visits)
    by_name = {p.search["searcher"]: (p, m) for p, m in zip(plans, measured)}
    for row in rows:
        if row["searcher"] in by_name:
            plan, m = by_name[row["searcher"]]
            row.update(measured_ms=m.max_ms, imbalance=m.imbalance,
                       measured_compute_ms=max(r.compute_ms for r in m.per_rank),
                       predicted_compute_ms=max(r.compute_ms for r in plan.cost.per_rank),
                       # Every rank, not only the slowest: where the model misses on a balanced plan.
                       measured_rank_compute_ms=json.dumps([round(r.compute_ms, 4) for r in m.per_rank]),
                       predicted_rank_compute_ms=json.dumps([round(r.compute_ms, 4) for r in plan.cost.per_rank]),
                       # Comm is the comm model's in both costs: with it, a rank's cost can be rebuilt.
                       rank_comm_ms=json.dumps([round(r.fwd_comm_ms + r.bwd_comm_ms, 4) for r in m.per_rank]),
                       # Every round of every rank: other estimators (the median) can be computed afterwards.
                       measured_rank_rounds_ms=json.dumps(m.extra["rounds_compute_ms_per_rank"]),
                       round_slowdown=json.dumps(m.extra["slowdown_per_round"]))
    return rows, [replace(p, measured_cost=m) for p, m in zip(plans, measured)]


def geomean_vs(df: pd.DataFrame, reference: str | tuple[str, ...] = REFERENCE, column: str = "measured_ms",
               label: str | None = None) -> pd.DataFrame:
    """Per searcher: geometric mean of its ``column`` (measured cost by default) over the reference's,
    over the tasks both planned.

    ``reference`` is a searcher's name, or several names: then on each task the lowest of theirs (the
    per-task best of a family). The ratio column is ``geomean_vs_<label>`` (``label`` defaults to the
    reference's name).
    """
    names = (reference,) if isinstance(reference, str) else reference
    ref = df[df.searcher.isin(names)].dropna(subset=[column]).groupby("task")[column].min()
    label = label or "_".join(names)
    out = []
    for name, g in df.groupby("searcher", sort=False):
        g = g.set_index("task")[column].dropna()
        common = g.index.intersection(ref.index)
        ratio = math.exp(np.mean(np.log(g[common] / ref[common]))) if len(common) else float("nan")
        out.append({"searcher": name, "tasks_planned": len(g), f"geomean_vs_{label}": ratio,
                    "tasks_compared": len(common)})
    return pd.DataFrame(out)


def run_bench(suite: Path, searchers: list[str], estimator: PlanEstimator, profile: str, rounds: int,
              out_dir: Path, name: str, seed: int = 0, limit: int | None = None,
              pattern: str = "*.json", command: str = "", gate: FitGate | None = None, visits: int = 1
              ) -> pd.DataFrame:
    """Every searcher on every task of ``suite``, measured; ``<name>.csv`` and ``<name>.md`` under ``out_dir``.

    Each task is measured under ``gate`` (default ``FitGate()``: the probe before it recorded). An
    interrupted run resumes from ``<name>.partial.csv``, the measurements its gate dropped from
    ``<name>.dropped.json``.
    """
    gate = FitGate() if gate is None else gate  # a fresh one a run: a gate carries its last probe from task to task
    tasks = sorted(suite.glob(pattern))[:limit]
    if not tasks:
        raise InputError(str(suite), "holds no task files (*.json)")
    from ..cost.kernel import require_device
    from ..formats import load_task

    require_device(get_profile(profile).device)  # before the first task's planning, not after it
    loaded = []
    for path in tasks:  # a task the profile cannot price is bad input, not a row of failed searchers
        task = load_task(path)
        try:
            estimator.check_task(task)
        except InputError as e:
            raise InputError(f"{path}: {e.field}", e.problem, e.fix) from None
        loaded.append(task)
    load_before = load1()
    out_dir.mkdir(parents=True, exist_ok=True)
    partial = out_dir / f"{name}.partial.csv"
    # The default gate's runs resume as they did before the gate could be set (their settings lack it).
    settings = {"suite": str(suite), "searchers": searchers, "profile": profile, "rounds": rounds, "seed": seed,
                "model": estimator.compute_name, **({"visits": visits} if visits > 1 else {}),
                **(gate.protocol if gate.protocol != FitGate().protocol else {})}
    rows = resumed_rows(partial, settings)
    drops = out_dir / f"{name}.dropped.json"  # kept beside the partial rows, under the same settings
    saved = json.loads(drops.read_text()) if drops.exists() else {}
    dropped: list[dict] = saved["dropped"] if saved.get("settings") == settings else []

    def drop(record: dict) -> None:  # saved at once: a run stopped while it waits keeps its drops
        dropped.append(record)
        write_text_atomic(drops, json.dumps({"settings": settings, "dropped": dropped}))

    def measure(task: Task) -> list[dict]:
        return bench_task(task, searchers, estimator, profile, rounds, seed, visits)[0]

    done = {r["task"] for r in rows}
    for task in tqdm(loaded, desc=f"bench {suite.name}"):
        if task.name not in done:
            rows += gate.measure(get_profile(profile), task.name, functools.partial(measure, task), drop)
        write_text_atomic(partial, pd.DataFrame(rows).to_csv(index=False))
    df = pd.DataFrame(rows)
    write_results(df, bench_markdown(df, suite, profile, rounds, load_before, load1(), command, visits,
                                     gate.note(df, dropped)), out_dir, name, partial)
    drops.unlink(missing_ok=True)
    return df


def resumed_rows(partial: Path, settings: dict) -> list[dict]:
    """Rows of an interrupted run with the same settings; otherwise start afresh (and say so)."""
    stamp = partial.with_suffix(".json")
    if partial.exists() and stamp.exists() and json.loads(stamp.read_text()) == settings:
        rows = pd.read_csv(partial).to_dict("records")
        tqdm.write(f"resuming {partial}: {len({r['task'] for r in rows})} task(s) done")
        return rows
    if partial.exists():
        tqdm.write(f"{partial} is from a run with other settings: starting afresh")
    partial.unlink(missing_ok=True)
    write_text_atomic(stamp, json.dumps(settings))
    return []


def resumable_rows(tasks: list[Task], partial: Path, settings: dict, run, desc: str) -> list[dict]:
    """Every task's rows: those an interrupted run with the same ``settings`` finished (:func:`resumed_rows`),
    then ``run(task)`` (a list of rows) for the rest, the partial file rewritten after each task."""
    rows = resumed_rows(partial, settings)
    done = {r["task"] for r in rows}
    for task in tqdm([t for t in tasks if t.name not in done], desc=desc):
        rows.extend(run(task))
        write_text_atomic(partial, pd.DataFrame(rows).to_csv(index=False))
    return rows


def write_results(df: pd.DataFrame, text: str, out: Path, name: str, partial: Path) -> None:
    """``<name>.csv`` and ``<name>.md`` under ``out``, then the interrupted-run files gone."""
    write_text_atomic(out / f"{name}.csv", df.to_csv(index=False))
    write_text_atomic(out / f"{name}.md", text)
    partial.unlink(missing_ok=True)
    partial.with_suffix(".json").unlink(missing_ok=True)


def bench_markdown(df: pd.DataFrame, suite: Path, profile: str, rounds: int, load_before: float,
                   load_after: float, command: str = "", visits: int = 1, gate_note: list[str] = ()) -> str:
    summary = geomean_vs(df)
    # The model's view of the same ratio: how far the measured figure moved from what the search aimed at.
    predicted = geomean_vs(df, column="predicted_ms").set_index("searcher")[f"geomean_vs_{REFERENCE}"]
    summary[f"predicted_geomean_vs_{REFERENCE}"] = summary.searcher.map(predicted)
    greedy = tuple(g for g in LITERATURE_GREEDY if g in set(df.searcher))
    if greedy:
        col = "geomean_vs_best_greedy"
        vs_best = geomean_vs(df, greedy, label="best_greedy").set_index("searcher")[col]
        summary[col] = summary.searcher.map(vs_best)
    bal = df.dropna(subset=["imbalance"]).groupby("searcher", sort=False)["imbalance"]
    summary["imbalance<=1.10"] = summary.searcher.map(lambda s: f"{(bal.get_group(s) <= 1.10).mean() * 100:.0f}%"
                                                      if s in bal.groups else "-")
    summary["median_plan_s"] = summary.searcher.map(df.groupby("searcher")["plan_seconds"].median())
    # Searcher.plan validates every plan it returns, so "not planned" means it reported the task infeasible.
    invalid = df.groupby("searcher")["valid"].apply(lambda v: int((~v.astype(bool)).sum()))
    summary["not_planned"] = summary.searcher.map(invalid)
    foreign = host_mismatch_note(get_profile(profile))
    lines = [f"# shardplan bench: `{suite}` on profile `{profile}`", "",
             *([f"**Measured on another host than the profile's labels'**: {foreign}.", ""] if foreign else []),
             machine_state_line(_all_slowdowns(df), probes_by_task(df)), "", *gate_note, *([""] if gate_note else []),
             f"Date {dt.date.today()}; {machine_stamp()['cpu_model']}; load {load_before:.2f} before, "
             f"{load_after:.2f} after. Measured = per-rank fwd+bwd compute timed on real FBGEMM kernels "
             f"(median of {rounds} interleaved round(s), each the profile's median of repeats"
             + (f", spread over {visits} visits per rank taken in turn with the ranks of the task's other plans "
                "too where they fit in memory together (else with the plan's own)" if visits > 1 else "")
             + "; one slowdown divided out per task: the median of the reference's readings around "
             "every visit of its plans) plus comm "
             "from the profile's comm model; predicted = the neural cost model plus the same comm model. "
             "Plan cost = slowest rank, ms. `geomean_vs_best_greedy`: over the best of the literature's greedy "
             f"baselines on each task ({', '.join(greedy) or 'none run'})."
             + (f" Command: `{command}`." if command else ""), "",
             "## Summary", "", summary.to_markdown(index=False, floatfmt=".3f"), "",
             "## Per task", "",
             df[["task", "tables", "ranks", "searcher", "measured_ms", "imbalance", "predicted_ms",
                 "plan_seconds", "valid", "error"]].astype({"error": object}).fillna({"error": ""})
             .to_markdown(index=False, floatfmt=".3f"),
             ""]
    return "\n".join(lines)


def _all_slowdowns(df: pd.DataFrame) -> list[float]:
    # Per plan round since 2026-11-22; per rank timing (``rank_slowdown``) in results written before.
    column = next((c for c in ("round_slowdown", "rank_slowdown") if c in df), None)
    return [x for cell in df[column].dropna() for x in json.loads(cell)] if column else []


def probes_by_task(df: pd.DataFrame) -> list[Fitness]:
    ratio, reference, tilt = Fitness.column_names()
    if ratio not in df:
        return []
    cols = [c for c in (ratio, reference, tilt) if c in df]
    first = df.groupby("task")[cols].first().dropna(subset=[ratio, reference])
    return [Fitness.from_columns(r) for r in first.itertuples()]


def machine_state_line(slowdowns: list[float], probes: list[Fitness] = ()) -> str:
    """How slow the machine ran while a results file was measured.

    Read off the reference workload (every measured figure is divided by its slowdown, a division
    only as good as the reference's likeness to the workload: ``bench/drift_probe.py``) and, where
    probed, off stored cost labels re-timed before each task (:mod:`shardplan.cost.fitness`):
    figures from a machine far from 1.0 on either deserve less trust than a quiet machine's.
    """
    if not slowdowns:
        return "Machine state: not recorded."
    q = np.quantile(slowdowns, [0.1, 0.5, 0.9])
    line = (f"Machine state: the reference workload ran {q[1]:.2f}x its quiet time (median over "
            f"{len(slowdowns)} timings; 10th-90th percentile {q[0]:.2f}-{q[2]:.2f}x). Quiet is 1.00; "
            f"cost data is only collected under {QUIET_TOLERANCE}x.")
    if probes:
        ratios = [f.label_ratio for f in probes]
        tilt_rule = f", long ranks' ratio within {TILT_TOLERANCE}x of the short ones'" if any(
            f.tilt is not None for f in probes) else ""
        line += (f" Stored cost labels re-timed before each task came out at {np.median(ratios):.2f}x "
                 f"(median; {min(ratios):.2f}-{max(ratios):.2f}x); {sum(f.fit for f in probes)} of "
                 f"{len(probes)} tasks were measured on a fit machine (labels within {LABEL_TOLERANCE}x, "
                 f"reference within {MEASURE_SLOW_LIMIT}x{tilt_rule}).")
        tilts = [f.tilt for f in probes if f.tilt is not None]
        if tilts:
            line += (f" Long stored ranks re-timed at {np.median(tilts):.2f}x the short ones' ratio "
                     f"(median; {min(tilts):.2f}-{max(tilts):.2f}x; 1.00: every size slowed alike).")
    return line
