"""Every searcher's plans of a suite, trained in the emulated-rank DLRM loop; samples/s and embedding time.

On a GPU profile (``h100``/``h200``) this is the GPU benchmark: TorchRec's
plan (planned for ``cuda``, where it may propose row-wise) and shardplan's,
each trained in :func:`shardplan.execute.dlrm_loop.run_loop` on the GPU. Two
stages, so that GPU time goes to measuring: ``plan`` runs here (TorchRec's
planner and the cost models run on CPU; the GPU machine has no TorchRec) and
``run`` on the GPU machine with the plans carried. Its CPU twin
(``--profile cpu-2c``) is what the tests run. Prints a table; writes
``<out>/gpu-suite-<profile>.{csv,md}``; the ``plan`` stage writes the plans' predicted costs
to ``<out>/gpu-plans-<profile>.{csv,md}``.

    python bench/gpu_suite.py plan --profile h200 --plans build/gpu-plans        # here
    python3 bench/gpu_suite.py run --profile h200 --plans build/gpu-plans --out $OUT   # on the GPU
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from shardplan.argtypes import at_least
from shardplan.cost.estimator import PlanEstimator, load_estimator
from shardplan.cost.kernel import time_reference
from shardplan.cost.profiles import get_profile, machine_stamp
from shardplan.errors import InputError, exit_status
from shardplan.execute.dlrm_loop import run_loop
from shardplan.formats import load_plan, load_task, save_plan, write_text_atomic
from shardplan.search import get_searcher

DEFAULT_SEARCHERS = "torchrec,neuroshard,neuroshard-tw,greedy-cost,greedy-lookup,greedy-size"


def _plan_task(path: Path, searchers: list[str], out: Path,
               est: PlanEstimator | tuple[str, Path | None, float | None]) -> list[dict]:
    """One task planned by every searcher; its plans saved to ``out``, one row per searcher.
    ``est``: an estimator, or the (profile, model file or None for its committed one, host reference or
    None) this (worker) process loads."""
    if isinstance(est, tuple):
        est = load_estimator(*est)
    task = load_task(path)
    rows = []
    for name in searchers:
        try:
            plan = get_searcher(name).plan(task, est)
        except InputError as e:
            rows.append({"task": task.name, "searcher": name, "planned": False, "error": str(e)[:200]})
            continue
        plan.search["cost_model"] = est.compute_name  # which model the plan was searched with
        save_plan(plan, out / f"{task.name}--{name}.json")
        rows.append({"task": task.name, "searcher": name, "planned": True, "error": "",
                     "predicted_ms": plan.cost.max_ms, "predicted_imbalance": plan.cost.imbalance,
                     "planning_s": plan.search["seconds"]})
    return rows


def plan_suite(est: PlanEstimator, suite: Path, searchers: list[str], out: Path, jobs: int = 1,
               model: Path | None = None, host_reference_ms: float | None = None) -> pd.DataFrame:
    """Plan every task with every searcher (on this machine: TorchRec and the cost models run on CPU);
    one row a (task, searcher): the plan's predicted cost, or why there is none. ``jobs`` > 1 plans that
    many tasks at once, each in a process of its own with one thread (a plan does not depend on it: the
    searchers are bounded by work, not time), loading ``model``, ``est``'s model file (default: its
    profile's committed one), at ``host_reference_ms``, ``est``'s host state (default: the collection's)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = sorted(suite.glob("*.json"))
    if jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=jobs, initializer=_one_thread) as pool:
            per_task = list(pool.map(_plan_task, paths, [searchers] * len(paths), [out] * len(paths),
                                     [(est.profile, model, host_reference_ms)] * len(paths)))
    else:
        per_task = [_plan_task(path, searchers, out, est) for path in paths]
    return pd.DataFrame([r for rows in per_task for r in rows],
                        columns=["task", "searcher", "planned", "error", "predicted_ms", "predicted_imbalance",
                                 "planning_s"])


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def plan_report(df: pd.DataFrame, profile: str, compute_model: str, out: Path, suite: str = "gpu-bench",
                name: str | None = None) -> str:
    """The plans' predicted costs against TorchRec's plan's: a statement about the cost model's view
    of the planners, not a measurement (that is the ``run`` stage). Written to ``<out>/<name>.{csv,md}``
    (default name ``gpu-plans-<profile>``)."""
    stem = out / (name or f"gpu-plans-{profile}")
    df.to_csv(stem.with_suffix(".csv"), index=False)
    ok = df[df.planned.astype(bool)]
    lines = [f"# Predicted plans of `{suite}` on `{profile}` ({dt.date.today()})", "",
             f"Predicted, not measured: compute by {compute_model}, comm by the profile's comm model. "
             "Plan cost = slowest rank's predicted fwd+bwd compute + comm.", "",
             "| searcher | tasks planned | predicted geomean / TorchRec's | median predicted max/mean | "
             "median planning s |", "| --- | --- | --- | --- | --- |"]
    # Imported here: the ``plan`` stage runs on this machine, the ``run`` stage's imports stay lean for the GPU one.
    from shardplan.execute.bench import geomean_vs

    # no plan at all (every task refused) still gets its report: the table is empty, the reasons below it
    ratios = geomean_vs(ok, column="predicted_ms").set_index("searcher")["geomean_vs_torchrec"] if len(ok) else {}
    for name, g in ok.groupby("searcher", sort=False):
        ratio = f"{ratios[name]:.3f}" if np.isfinite(ratios[name]) else "-"
        lines.append(f"| {name} | {len(g)} | {ratio} | {g.predicted_imbalance.median():.3f} | "
                     f"{g.planning_s.median():.2f} |")
    failed = df[~df.planned.astype(bool)]
    if len(failed):
        lines += ["", "Not planned: " + "; ".join(f"{r.task} by {r.searcher} ({r.error})" for r in failed.itertuples())]
    text = "\n".join(lines) + "\n"
    write_text_atomic(stem.with_suffix(".md"), text)
    return text


def run_suite(profile: str, plans: Path, iterations: int, max_seconds: float | None = None,
              partial: Path | None = None) -> pd.DataFrame:
    """Train every plan in the emulated-rank loop on this machine's device, a task's plans one after the
    other (the files sort by task), so that a deadline (``max_seconds``: no plan starts after it) leaves
    whole tasks. ``partial``: a CSV rewritten after every plan, so that a killed run keeps what it measured.

    The profile's reference workload is timed just before and after each plan (``ref_before_ms``,
    ``ref_after_ms``), as beside every cost sample: on a GPU it reads the host's launch jitter, which the
    plan's short ops share, so a round's timings can be set beside the collection's host state."""
    est = load_estimator(profile)
    device = get_profile(profile).device
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    rows = []
    for path in sorted(plans.glob("*--*.json")):
        if deadline is not None and time.monotonic() > deadline:
            print(f"deadline: stopped before {path.name}")
            break
        plan = load_plan(path)
        name = plan.search["searcher"]
        ref_before = time_reference(device)
        r = run_loop(plan, profile, est, iterations=iterations, name=name)
        ref_after = time_reference(device)
        rows.append({"task": plan.task.name, "searcher": name, "planned": True, "ranks": plan.task.topology.world_size,
                     "embedding_ms": r.embedding_ms, "dense_ms": r.dense_ms, "iteration_ms": r.iteration_ms,
                     "samples_per_s": r.samples_per_s, "predicted_ms": max(r.predicted_rank_ms),
                     "rank_imbalance": r.embedding_ms / np.mean(r.rank_ms),
                     "loss_first": r.losses[0], "loss_last": r.losses[-1], "planning_s": plan.search["seconds"],
                     "plan_cost_model": plan.search.get("cost_model", ""), "predicted_by": est.compute_name,
                     "rank_measured_ms": json.dumps([round(x, 4) for x in r.rank_ms]),
                     "rank_predicted_ms": json.dumps([round(x, 4) for x in r.predicted_rank_ms]),
                     "device": r.device, "ref_before_ms": round(ref_before, 4), "ref_after_ms": round(ref_after, 4)})
        print(f"{plan.task.name} {name}: embedding {r.embedding_ms:.3f} ms, {r.samples_per_s:,.0f} samples/s")
        if partial is not None:
            pd.DataFrame(rows).to_csv(partial, index=False)
    return pd.DataFrame(rows)


def report(df: pd.DataFrame, profile: str, out: Path) -> str:
    stem = out / f"gpu-suite-{profile}"
    df.to_csv(stem.with_suffix(".csv"), index=False)
    lines = [f"# Emulated-rank DLRM loop on `{profile}` ({dt.date.today()}, {machine_stamp()['cpu_model']})", "",
             "Embedding time = slowest rank's measured fwd+bwd + modelled comm; samples/s over the whole "
             "iteration (dense part included).", "",
             "| searcher | tasks | geomean embedding time / TorchRec's | median samples/s |",
             "| --- | --- | --- | --- |"]
    if len(df) and "torchrec" in set(df.searcher):
        base = df[df.searcher == "torchrec"].set_index("task").embedding_ms
        for name, g in df.groupby("searcher"):
            common = g[g.task.isin(base.index)]
            ratio = float(np.exp(np.mean(np.log(common.embedding_ms.to_numpy() / base[common.task].to_numpy()))))
            lines.append(f"| {name} | {len(g)} | {ratio:.3f} | {g.samples_per_s.median():.0f} |")
    text = "\n".join(lines) + "\n"
    write_text_atomic(stem.with_suffix(".md"), text)
    return text


def rounds_report(runs: list[Path], out: Path, name: str, command: str, plans: Path | None = None,
                  est: PlanEstimator | None = None) -> str:
    """Several ``run`` CSVs of the same plans (rounds) in one table: per searcher and round, the geometric
    mean of its measured embedding time over TorchRec's on the same task, over every rank and over the
    ranks after the first (the emulated loop's first-timed rank carried a penalty in runs before the
    rank order turned, see :mod:`shardplan.execute.dlrm_loop`), the embedding stage's samples/s (global
    batch / embedding time) and the iteration's as measured; then per task and the cost model's per-rank
    error: as each run's CSV recorded it (where a neural model priced it), or, given ``plans`` (the plans
    measured) and ``est``, as ``est`` prices them now. Writes ``<out>/<name>.md``."""
    from shardplan.execute.bench import geomean_vs  # as in plan_report: the `run` stage's imports stay lean

    repriced = {}
    if plans is not None and est is not None:
        for path in sorted(plans.glob("*--*.json")):
            plan = load_plan(path)
            repriced[(plan.task.name, plan.search["searcher"])] = np.array(
                [r.total_ms for r in est.estimate(plan).per_rank])
    lines = [f"# GPU suite, {len(runs)} round(s) of the same plans ({dt.date.today()})", "",
             f"Command: `{command}`", "",
             "Measured: every rank's FBGEMM forward + backward (fused SGD) on the GPU by CUDA events, median over "
             "the iterations, plus the profile's modelled all-to-all (alpha-beta, labelled modelled). Embedding "
             "time = the slowest rank's. Ratios are within a round, against TorchRec's plan of the same task.", "",
             "| round | searcher | tasks | geomean embedding time / TorchRec's | same, ranks after the first | "
             "median embedding-stage samples/s | median iteration samples/s (as measured) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    per_task: dict[str, dict[str, list[float]]] = {}
    pairs: dict[str, list[tuple[float, float]]] = {}  # per searcher: every rank's (predicted, measured) ms
    loop_stats: dict[str, tuple[list[np.ndarray], list[float]]] = {}  # per searcher: ranks' ms, dense ms
    for k, path in enumerate(runs, 1):
        df = pd.read_csv(path)
        measured = [np.array(json.loads(m)) for m in df.rank_measured_ms]
        df["all_ms"] = [m.max() for m in measured]
        df["after_first_ms"] = [m[1:].max() if len(m) > 1 else m.max() for m in measured]
        df["stage_sps"] = df.samples_per_s * df.iteration_ms / df.all_ms  # = global batch / embedding time
        ratio = {col: geomean_vs(df, column=col).set_index("searcher")["geomean_vs_torchrec"]
                 for col in ("all_ms", "after_first_ms")}
        for searcher, g in df.groupby("searcher"):
            lines.append(f"| {k} | {searcher} | {len(g)} | {ratio['all_ms'][searcher]:.3f} | "
                         f"{ratio['after_first_ms'][searcher]:.3f} | {g.stage_sps.median():,.0f} | "
                         f"{g.samples_per_s.median():,.0f} |")
            for task, ms in zip(g.task, g.all_ms):
                per_task.setdefault(task, {}).setdefault(searcher, []).append(ms)
        for row, m in zip(df.itertuples(), measured):
            stats = loop_stats.setdefault(row.searcher, ([], []))
            stats[0].append(m)
            stats[1].append(row.dense_ms)
            if repriced:
                pred = repriced[(row.task, row.searcher)]
            elif "neural" in str(row.predicted_by):
                pred = np.array(json.loads(row.rank_predicted_ms))
            else:
                continue
            for first, pm in enumerate(zip(pred.tolist(), m.tolist())):
                pairs.setdefault(row.searcher, []).append(pm)
                pairs.setdefault(f"{row.searcher}, ranks after the first", []).extend([pm] if first else [])
    searchers = sorted({s for v in per_task.values() for s in v})
    lines += ["", "What the emulated loop measured besides, all rounds: rank 0 over the median of the others "
              "(runs before the rank order turned timed rank 0 first in every iteration, and it carried that "
              "penalty; since, it goes first in 1 of n), the ranks after the first (10th-90th percentile) and "
              "the dense part's time as recorded:", "",
              "| searcher | rank 0 / median of the others (median over plans) | ranks after the first, ms | "
              "dense ms |", "| --- | --- | --- | --- |"]
    for searcher in searchers:
        ms, dense = loop_stats[searcher]
        first = np.median([m[0] / np.median(m[1:]) for m in ms if len(m) > 1])
        after = np.concatenate([m[1:] for m in ms])
        lines.append(f"| {searcher} | {first:.2f} | {np.percentile(after, 10):.2f}-{np.percentile(after, 90):.2f} | "
                     f"{min(dense):.1f}-{max(dense):.1f} |")
    lines += ["", "Measured embedding time (ms) per task, each round:", "",
              "| task | " + " | ".join(searchers) + " |", "| --- |" + " --- |" * len(searchers)]
    for task in sorted(per_task):
        lines.append(f"| {task} | " + " | ".join(" / ".join(f"{x:.3f}" for x in per_task[task].get(s, []))
                                                  for s in searchers) + " |")
    if pairs:
        by = est.compute_name if repriced else "the neural model the run recorded (rounds it priced)"
        lines += ["", f"Per-rank compute + comm predicted by {by} beside measured (Spearman: the ranks' order, "
                  "predicted against measured):", "",
                  "| plans of | ranks | MAPE | median abs error | median error (predicted over measured - 1) | "
                  "within 15% | Spearman |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for searcher, pm in sorted(pairs.items()):
            pred, meas = np.array(pm).T
            e = pred / meas - 1
            a = np.abs(e)
            lines.append(f"| {searcher} | {len(a)} | {100 * a.mean():.1f}% | {100 * np.median(a):.1f}% | "
                         f"{100 * np.median(e):+.1f}% | {int((a <= 0.15).sum())}/{len(a)} | "
                         f"{spearmanr(pred, meas).statistic:.3f} |")
    text = "\n".join(lines) + "\n"
    write_text_atomic(out / f"{name}.md", text)
    return text


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stage", choices=["plan", "run", "rounds"])
    ap.add_argument("--runs", nargs="+", type=Path, help="`rounds`: the run CSVs to put side by side")
    ap.add_argument("--name", help="the results file's name (default: `plan` gpu-plans-<profile>, `rounds` "
                                   "gpu-suite-rounds)")
    ap.add_argument("--reprice", type=Path, help="`rounds`: the measured plans, priced again by --profile's model")
    ap.add_argument("--profile", default="h200")
    ap.add_argument("--model", type=Path, help="`plan`, `rounds --reprice`: this compute model file instead of "
                                               "the profile's committed one (a candidate)")
    ap.add_argument("--host-reference-ms", type=float, default=None,
                    help="`plan`: price at the host state of a machine whose reference workload runs in this many ms "
                         "(`shardplan profiles --host-reference`; default: the collection's state)")
    ap.add_argument("--suite", default="data/tasks/gpu-bench")
    ap.add_argument("--searchers", default=DEFAULT_SEARCHERS)
    ap.add_argument("--plans", default="build/gpu-plans", help="where `plan` writes and `run` reads the plans")
    ap.add_argument("--iterations", type=at_least(1), default=20)
    ap.add_argument("--max-seconds", type=at_least(0, float), default=None, help="`run`: start no plan after this long")
    ap.add_argument("--jobs", type=at_least(1), default=1, help="`plan`: tasks planned at once, one process each")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.stage == "plan":
        est = load_estimator(args.profile, args.model, args.host_reference_ms)
        df = plan_suite(est, Path(args.suite), args.searchers.split(","), Path(args.plans), args.jobs, args.model,
                        args.host_reference_ms)
        print(plan_report(df, args.profile, est.compute_name, out, Path(args.suite).name, args.name))
        print(f"plans in {args.plans}")
    elif args.stage == "rounds":
        if not args.runs:
            raise InputError("--runs", "names no run CSV", "give the CSVs that `run` wrote, one per round")
        command = "python bench/gpu_suite.py " + " ".join(argv or sys.argv[1:])
        est = load_estimator(args.profile, args.model) if args.reprice else None
        print(rounds_report(args.runs, out, args.name or "gpu-suite-rounds", command, args.reprice, est))
    else:
        df = run_suite(args.profile, Path(args.plans), args.iterations, args.max_seconds,
                       partial=out / f"gpu-suite-{args.profile}.partial.csv")
        print(report(df, args.profile, out))


if __name__ == "__main__":
    sys.exit(exit_status(main))
