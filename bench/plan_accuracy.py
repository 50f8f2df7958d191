"""How well the cost model predicts plans nobody tuned for: TorchRec's plans of unseen tasks.

For every task of a suite, TorchRec's planner plans it; the committed neural
model predicts each rank's fwd+bwd compute; every rank is then measured on
real FBGEMM kernels (independent ids: another seed than the cost data's). Prints
a table and writes ``bench/results/plan-accuracy-<profile>-<suite>.{md,csv}``.

With ``--calibrate`` every rank is also timed beside labelled stored ranks like
it and expressed on the labels' host (:mod:`shardplan.cost.calibration`): on a
busy host that slows ranks unlike the reference workload, the figure the
model should be held to. Both are reported.

A run is resumable: every finished task's rows go to
``<name>.partial.json`` at once, and the same command run again (same
``--name``) measures only the tasks not in it; the partial file goes when the
results are written. So a ``--wait-fit`` that runs out on a host that is only
fit now and then loses nothing but the wait. ``--only-measured`` writes the
results of the tasks measured so far and measures no more; ``--tasks A,B`` measures
only the tasks named (in that order), writes the tasks measured so far and
keeps the partial file, so a few tasks of interest (say, the ranks an earlier
pool missed) can be measured first by every run of a suite and each run
still resumed later for the rest.

On a host that is fit only in blips, two options hold a task to a host fit
through it: ``--fit-streak N`` starts it only after N fit probes in a row, and
``--fit-after`` probes again when it is done and, where that probe finds the
host unfit, drops the task's figures and measures it again (at most
``--retakes`` times; every drop is recorded in the results).

Every row records the compute model that priced it (``model``). A run resumed
after the profile's model was retrained would otherwise report a blend of two
models: when the results are written, the rows of another model (or of none
recorded) are priced again by today's, their tasks planned again, and a rank
whose plan is no longer the one measured is an error, not a silent mix.

    .venv/bin/python bench/plan_accuracy.py --suite data/tasks/unseen-a
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from shardplan.argtypes import at_least
from shardplan.cli import add_wait_fit, fit_gate
from shardplan.cost.estimator import PlanEstimator, load_estimator
from shardplan.cost.fit_gate import FitGate
from shardplan.cost.profiles import get_profile, load1
from shardplan.cost.specs import ShardSpec, canonical, rank_specs, specs_to_json
from shardplan.domain import OPTIMIZERS, Plan, Task
from shardplan.errors import InputError, exit_status
from shardplan.execute.bench import machine_state_line, probes_by_task
from shardplan.execute.measure import measure_plan, measure_plan_calibrated
from shardplan.formats import load_task, write_json_atomic, write_text_atomic
from shardplan.search import get_searcher
from pooled import TOLERANCE  # siblings: bench/ is on sys.path when run
from provenance import provenance


def rank_signature(specs: list[ShardSpec]) -> str:
    """A short fingerprint of a rank's shards (order-free), so that later runs can tell whether they
    measured the same plan (``bench/plan_accuracy_runs.py`` pools runs of the same plans)."""
    return hashlib.sha1(specs_to_json(list(canonical(specs))).encode()).hexdigest()[:12]


# What a run measured; with the gate's protocol, which tasks it admitted: a run resumes only under the same.
MEASURE_KEYS = ("suite", "profile", "searcher", "rounds", "visits", "optimizer", "calibrate")
RESUME_KEYS = (*MEASURE_KEYS, *FitGate().protocol)


def protocol(args: argparse.Namespace) -> dict[str, object]:
    """What a run measured (:data:`RESUME_KEYS`), as its partial file records it."""
    return {**{k: getattr(args, k) for k in MEASURE_KEYS}, **fit_gate(args).protocol}


def resumed(partial: Path, args: argparse.Namespace) -> tuple[list[dict], list[dict]]:
    """The rows of the tasks an earlier run of the same command finished, and the measurements it dropped
    (``--fit-after``); none without ``partial``. Raises :class:`InputError` where that run measured
    otherwise (another suite, profile or protocol)."""
    if not partial.exists():
        return [], []
    try:
        saved = json.loads(partial.read_text())
        rows, options, dropped = saved["rows"], saved["options"], saved.get("dropped", [])
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise InputError(str(partial), f"not a partial run this script wrote ({e})",
                         "delete it to measure the suite from the start") from e
    ours = protocol(args)
    if options != ours:
        differ = sorted(k for k in RESUME_KEYS if options.get(k) != ours[k])
        raise InputError("--name", f"{partial} holds a run measured with other {', '.join(differ)} "
                         f"({', '.join(f'{k}={options.get(k)!r}' for k in differ)})",
                         "give another --name, or the same options to resume it")
    return rows, dropped


def resumed_note(done: set[str], tasks: int, part: bool) -> list[str]:
    """The results file's word that ``tasks`` tasks were measured by more than this start (none when all were
    this start's); ``part`` where the file holds only the tasks measured so far (``--only-measured``,
    ``--tasks``)."""
    if part:
        return [f"Part of a run: only the {tasks} tasks the starts of the same command have measured so far "
                "(`--only-measured` or `--tasks`; the suite's other tasks are not in this file, and the run can "
                "still be resumed). The date and load above are this call's; each task's probe is its own."]
    if not done:
        return []
    return [f"Resumed: {len(done)} of the {tasks} tasks were measured by an earlier start of the same command "
            "(the date and load above are this start's; each task's probe is its own)."]


def calibrated_rounds(plan: Plan, profile: str, rounds: int) -> dict[int, dict[str, float]]:
    """Per rank with shards, its neighbour-calibrated fwd/bwd ms (:func:`measure_plan_calibrated`), the
    neighbours' factor and what they were chosen by, how far its rounds spread and the reference's slowdown."""
    m = measure_plan_calibrated(plan, profile, rounds)
    return {r: {"cal_fwd_ms": rc.fwd_compute_ms, "cal_bwd_ms": rc.bwd_compute_ms,
                "cal_factor": m.extra["calibration_factor_per_rank"][r],
                "cal_features": m.extra["calibration_neighbours_by"],
                "cal_labels": m.extra["calibration_labels"],
                "cal_round_spread": max(m.extra["rounds_compute_ms_per_rank"][r])
                / min(m.extra["rounds_compute_ms_per_rank"][r]),
                "cal_reference_slowdown": m.extra["reference_slowdown"]}
            for r, rc in enumerate(m.per_rank) if rc.compute_ms > 0}


def task_rows(plan: Plan, task: Task, args: argparse.Namespace) -> list[dict]:
    """One row per rank with shards: predicted and measured fwd/bwd ms (and calibrated, with ``--calibrate``)."""
    measured = measure_plan(plan, args.profile, rounds=args.rounds, visits=args.visits)
    calibrated = calibrated_rounds(plan, args.profile, args.rounds) if args.calibrate else {}
    return [{**calibrated.get(r, {}), "task": task.name, "rank": r, "tables": len(task.tables),
             "shards": sum(1 for t in plan.tables for s in t.shards if s.rank == r), **priced,
             "meas_fwd_ms": m.fwd_compute_ms, "meas_bwd_ms": m.bwd_compute_ms,
             "reference_slowdown": measured.extra["slowdown"]}
            for r, (priced, m) in enumerate(zip(priced_ranks(plan), measured.per_rank)) if m.compute_ms > 0]


def priced_ranks(plan: Plan) -> list[dict]:
    """Per rank of ``plan``: its shards' signature, the model that priced the plan and its predicted fwd/bwd
    ms; what a row keeps of the prediction, so that :func:`repriced` can replace it."""
    return [{"rank_signature": rank_signature(specs), "model": plan.cost.extra["compute_model"],
             "pred_fwd_ms": rc.fwd_compute_ms, "pred_bwd_ms": rc.bwd_compute_ms}
            for rc, specs in zip(plan.cost.per_rank, rank_specs(plan))]


def suite_task(path: Path, args: argparse.Namespace) -> Task:
    """The task at ``path``, run with ``--optimizer``'s optimizer where one is given."""
    task = load_task(path)
    return dataclasses.replace(task, optimizer=args.optimizer) if args.optimizer else task


def repriced(rows: list[dict], args: argparse.Namespace, est: PlanEstimator) -> tuple[list[dict], list[str]]:
    """``rows`` with every rank another model priced (or none recorded) priced again by ``est``: its task
    planned again, the same rank of it (by its shards' signature) read off the new plan's cost. Returns the
    rows and the tasks priced again. Raises :class:`InputError` where a task's plan is no longer the one
    measured: its figures could not be told apart from another plan's."""
    stale = sorted({r["task"] for r in rows if r.get("model") != est.compute_name})
    if not stale:
        return rows, []
    tasks = {t.name: t for t in (suite_task(p, args) for p in suite_paths(Path(args.suite), []))}
    fresh: dict[tuple[str, int], dict] = {}
    for name in stale:
        if name not in tasks:
            raise InputError("--suite", f"{name}, measured in this run, is no longer a task of {args.suite}",
                             "restore its task file, or measure the suite again under a new --name")
        plan = get_searcher(args.searcher).plan(tasks[name], est)
        fresh.update(((name, r), priced) for r, priced in enumerate(priced_ranks(plan)))
    out = []
    for row in rows:
        new = fresh.get((row["task"], row["rank"]))
        if new is not None:
            if new["rank_signature"] != row["rank_signature"]:
                raise InputError("--name", f"{row['task']} rank {row['rank']} was measured on another plan than "
                                 f"{args.searcher} makes today, so today's model cannot price what was measured",
                                 "measure the suite again under a new --name")
            row = {**row, **new}
        out.append(row)
    return out, stale


def task_names(text: str) -> list[str]:
    """``--tasks``: comma-separated task names, each once."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of distinct task names")
    return names


def suite_paths(suite: Path, tasks: list[str]) -> list[Path]:
    """The suite's task files, sorted; or where ``tasks`` names some, those files in that order."""
    paths = sorted(suite.glob("*.json"))
    if not tasks:
        return paths
    by_name = {p.stem: p for p in paths}
    unknown = [t for t in tasks if t not in by_name]
    if unknown:
        raise InputError("--tasks", f"{', '.join(unknown)}: no such task file in {suite}",
                         f"name tasks of the suite by their file names without .json (e.g. {paths[0].stem})"
                         if paths else "give a --suite that holds task files")
    return [by_name[t] for t in tasks]


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="data/tasks/unseen-a")
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--searcher", default="torchrec")
    ap.add_argument("--rounds", type=at_least(1), default=1)
    ap.add_argument("--visits", type=at_least(1), default=1, help="visits per rank and round (measure_plans)")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--name", help="results file stem (default plan-accuracy-PROFILE-SUITE)")
    add_wait_fit(ap, "0 measures at once and records the probe", gate=True)
    ap.add_argument("--optimizer", choices=OPTIMIZERS,
                    help="plan, price and time every task with this fused optimizer instead of its own (a profile "
                         "of that optimizer's data, e.g. one labelled by shardplan collect paired)")
    ap.add_argument("--calibrate", action="store_true",
                    help="also time every rank beside labelled stored ranks like it (neighbour calibration)")
    ap.add_argument("--only-measured", action="store_true",
                    help="write the results of the tasks an earlier start of this --name measured; measure none")
    ap.add_argument("--tasks", type=task_names, default=[],
                    help="comma-separated task file names without .json (e.g. unseen-d-14): measure only these, in "
                         "this order, and keep the partial file so the run can be resumed for the rest")
    return ap


def main() -> None:
    args = build_parser().parse_args()
    est = load_estimator(args.profile)
    searcher = get_searcher(args.searcher)
    out = Path(args.out)
    stem = args.name or f"plan-accuracy-{args.profile}-{Path(args.suite).name}"
    partial = out / f"{stem}.partial.json"
    rows, dropped = resumed(partial, args)
    done = {r["task"] for r in rows}
    if done:
        print(f"resuming {stem}: {len(done)} task(s) already measured ({partial})")
    elif args.only_measured:
        raise InputError("--only-measured", f"no task of {stem} has been measured ({partial} does not exist)",
                         "give the --name of a run that stopped part way")
    load_before = load1()
    profile = get_profile(args.profile)

    def save() -> None:  # the tasks done and the measurements dropped, kept for the next start
        write_json_atomic(partial, {"options": protocol(args), "rows": rows, "dropped": dropped})

    def drop(record: dict) -> None:  # saved at once: a run stopped while it waits keeps its drops
        dropped.append(record)
        save()

    gate = fit_gate(args)
    for path in tqdm(suite_paths(Path(args.suite), args.tasks), desc="tasks"):
        task = suite_task(path, args)
        if task.name in done or args.only_measured:
            continue
        try:
            plan = searcher.plan(task, est)
        except InputError as e:  # no plan, or one our validator refuses (TorchRec's memory count is not ours)
            print(f"{task.name}: {args.searcher} cannot plan it: {e}")
            continue
        rows += gate.measure(profile, task.name, functools.partial(task_rows, plan, task, args), drop)
        save()
    if not rows:
        raise InputError("--tasks" if args.tasks else "--suite",
                         f"no task was measured: {args.searcher} could plan none of them", "name tasks it can plan")
    part = args.only_measured or bool(args.tasks)
    rows, repriced_tasks = repriced(rows, args, est)
    df = pd.DataFrame(rows)
    df["pred_ms"] = df.pred_fwd_ms + df.pred_bwd_ms
    df["meas_ms"] = df.meas_fwd_ms + df.meas_bwd_ms
    df["rel_err"] = (df.pred_ms - df.meas_ms) / df.meas_ms
    if args.calibrate:
        df["cal_ms"] = df.cal_fwd_ms + df.cal_bwd_ms
        df["cal_rel_err"] = (df.pred_ms - df.cal_ms) / df.cal_ms
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / f"{stem}.csv", index=False)
    worst = lambda x: x.iloc[np.argmax(np.abs(x))]  # noqa: E731
    errs = ["rel_err"] + (["cal_rel_err"] if args.calibrate else [])
    per_task = df.groupby("task").agg(ranks=("rank", "count"), max_shards=("shards", "max"),
                                      **{f"mape_{e}": (e, lambda x: np.mean(np.abs(x))) for e in errs},
                                      **{f"worst_{e}": (e, worst) for e in errs})

    def scores(err: pd.Series) -> str:
        a = err.abs()
        return (f"MAPE {a.mean() * 100:.1f}%, median {a.median() * 100:.1f}%, within {TOLERANCE:.0%}: "
                f"{(a <= TOLERANCE).mean() * 100:.0f}% of ranks, worst {a.max() * 100:.1f}%")

    summary = (f"{len(df)} ranks of {df.task.nunique()} {args.searcher} plans: per-rank fwd+bwd compute, "
               f"predicted by the `{args.profile}` model {est.compute_name} vs measured on real FBGEMM "
               f"({args.rounds} round(s) of {args.visits} visit(s), divided by the reference's slowdown): "
               f"{scores(df.rel_err)}.")
    if args.calibrate:
        summary += (f" Against the same ranks measured by neighbour calibration (each beside labelled stored "
                    f"ranks like it, {args.rounds} round(s); factor "
                    f"{df.cal_factor.min():.2f}-{df.cal_factor.max():.2f}, "
                    f"reference {df.cal_reference_slowdown.median():.2f}x quiet; a rank's rounds differ by a median "
                    f"{(df.cal_round_spread.median() - 1) * 100:.1f}%): {scores(df.cal_rel_err)}.")
    md = [f"# Predicted vs measured rank compute on {args.searcher} plans of `{args.suite}`", "",
          *provenance(load_before), *resumed_note(done, df.task.nunique(), part),
          *([f"Priced again by this model (measured when another priced them): {', '.join(repriced_tasks)}."]
            if repriced_tasks else []),
          *gate.note(df, dropped), "",
          machine_state_line(df.groupby("task").reference_slowdown.first().dropna().tolist(), probes_by_task(df)), "",
          summary, "",
          "| task | ranks | max shards/rank | MAPE | worst rank error |"
          + (" MAPE, calibrated | worst, calibrated |" if args.calibrate else ""),
          "| --- | --- | --- | --- | --- |" + (" --- | --- |" if args.calibrate else "")]
    md += [f"| {t} | {int(r.ranks)} | {int(r.max_shards)} | "
           + " | ".join(f"{r[f'mape_{e}'] * 100:.1f}% | {r[f'worst_{e}'] * 100:+.1f}%" for e in errs) + " |"
           for t, r in per_task.iterrows()]
    write_text_atomic(out / f"{stem}.md", "\n".join(md) + "\n")
    if not part:  # a part written out can still be resumed
        partial.unlink(missing_ok=True)
    print("\n".join(md))


if __name__ == "__main__":
    sys.exit(exit_status(main))
