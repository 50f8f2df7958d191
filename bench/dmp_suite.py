"""Real training, not kernels alone: the default searcher's plans and its peers', trained under
DistributedModelParallel.

For every task of a suite with at most ``--max-ranks`` ranks (one gloo process per rank; this
machine has 2 cores, so 2-rank tasks give each process a core of its own), plan it with the
default searcher and with each of ``--peers`` (default TorchRec's planner; a literature greedy such
as ``greedy-lookup`` stands for the hand-written heuristics), all restricted to the sharding types
gloo runs (table-wise, column-wise, data-parallel), and train the task's DLRM with each plan as its
``ShardingPlan`` (``shardplan.execute.dmp.compare``: the plans take turns, ``--rounds`` runs each).
Measured = wall-clock samples/s of the whole training iteration (embedding lookups, all-to-all,
dense layers, optimizer; the slowest rank's), median over the rounds; predicted = the plans' cost
blocks (the neural compute model plus the comm model), for context. Resumable: the finished tasks
of an interrupted run with the same settings are kept. On a drifting host one call's ratios move by
several percent; ``--pool`` merges the runs of several calls of the same plans (:func:`pool`).

    .venv/bin/python bench/dmp_suite.py --suite data/tasks/cpu-bench --peers torchrec,greedy-lookup
    .venv/bin/python bench/dmp_suite.py --pool cpu-bench,cpu-bench-peers --name cpu-bench-pooled
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import pandas as pd

from shardplan.argtypes import at_least
from shardplan.cost.estimator import load_estimator
from shardplan.cost.profiles import load1
from shardplan.errors import InputError, exit_status
from shardplan.execute.bench import resumable_rows, write_results
from shardplan.execute.dmp import compare, gloo_plans
from shardplan.formats import load_task
from shardplan.search import DEFAULT_SEARCHER, get_searcher
from provenance import provenance  # a sibling: bench/ is on sys.path when a script there runs


def _run_task(task, estimator, peers: list[str], iterations: int, warmup: int, rounds: int) -> dict:
    row: dict = {"task": task.name, "ranks": task.topology.world_size, "tables": len(task.tables)}
    plans, errors = gloo_plans(task, peers, estimator)
    if errors:
        row["error"] = "; ".join(f"{peer}: {why}" for peer, why in errors.items())
    if len(plans) == 1:
        return row
    results = compare(plans, iterations, warmup, rounds, seed=0, backend="gloo")
    for name, plan in plans.items():
        runs = results[name]
        row[f"{name}_samples_per_s"] = statistics.median(r.samples_per_s for r in runs)
        row[f"{name}_runs"] = json.dumps([round(r.samples_per_s, 1) for r in runs])
        row[f"{name}_loss_fell"] = all(r.loss_fell for r in runs)
        row[f"{name}_predicted_ms"] = plan.cost.max_ms
    for peer in [p for p in plans if p != "shardplan"]:  # in order: the CSV keeps its columns
        # Iteration time ours over the peer's: comparable with the bench's cost ratio (lower is better).
        row[f"time_ratio_vs_{peer}"] = row[f"{peer}_samples_per_s"] / row["shardplan_samples_per_s"]
        row[f"predicted_ratio_vs_{peer}"] = row["shardplan_predicted_ms"] / row[f"{peer}_predicted_ms"]
    return row


def _markdown(df: pd.DataFrame, args: argparse.Namespace, peers: list[str], load_before: float,
              pooled: list[str] | None = None) -> str:
    how = (f"; the runs of {len(pooled)} earlier calls pooled ({', '.join(pooled)}; each call's file gives its "
           "settings), nothing trained by this command." if pooled else
           f"; {args.iterations} timed iterations after {args.warmup} warm-up, {args.rounds} interleaved runs per "
           "plan, gloo.")
    lines = [f"# DistributedModelParallel training: `{DEFAULT_SEARCHER}` plans against {', '.join(peers)} on "
             f"`{args.suite}`", "", *provenance(load_before, how), "",
             "Measured: samples/s of real multi-process TorchRec DistributedModelParallel training of the task's "
             "DLRM (one process per rank; the whole iteration, the slowest rank's wall clock), median over the "
             "runs. `time_ratio_vs_X` = X's samples/s over ours (our iteration time over X's; < 1: ours trains "
             "faster). `predicted_ratio_vs_X`: the plans' predicted costs (neural compute model + comm model), "
             "embedding part only. Every planner limited to gloo's sharding types.", ""]
    for peer in peers:
        col = f"time_ratio_vs_{peer}"
        ok = df.dropna(subset=[col]) if col in df else df.iloc[0:0]
        if not len(ok):
            lines += [f"Against `{peer}`: no task compared.", ""]
            continue
        geo = lambda c: math.exp(sum(map(math.log, ok[c])) / len(ok))  # noqa: E731
        lines += [f"**Against `{peer}`: geometric mean time ratio over {len(ok)} tasks {geo(col):.3f}** "
                  f"(predicted, embedding part: {geo(f'predicted_ratio_vs_{peer}'):.3f}); ours faster on "
                  f"{int((ok[col] < 1).sum())} of {len(ok)}.", ""]
    cols = ["task", "ranks", "tables", "shardplan_samples_per_s",
            *[c for p in peers for c in (f"{p}_samples_per_s", f"time_ratio_vs_{p}", f"predicted_ratio_vs_{p}")
              if c in df],
            *[c for c in df if c.endswith("_loss_fell")]]
    lines += [df[cols].to_markdown(index=False, floatfmt=".3f"), ""]
    if "error" in df and df.error.notna().any():
        lines += ["Not planned: " + "; ".join(f"{r.task} ({r.error})" for r in df[df.error.notna()].itertuples()), ""]
    return "\n".join(lines)


def pool(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Several calls' rows of the same plans as one: per task and plan, the median over every run of
    every call (``<plan>_runs``). A peer's ratio compares medians over the calls that trained that peer
    only, ours included, so both sides saw the same moments of a drifting host. The plans must be the
    same in every call (their predicted costs equal), or the runs would not be of one plan."""
    plans = sorted({c[: -len("_runs")] for f in frames for c in f if c.endswith("_runs")} - {"shardplan"})
    runs_of = lambda calls, plan: [x for c in calls for x in json.loads(c[f"{plan}_runs"])]  # noqa: E731
    rows = []
    for task in sorted(set.intersection(*(set(f.task) for f in frames))):
        calls = [f[f.task == task].iloc[0] for f in frames]
        row: dict = {"task": task, "ranks": calls[0].ranks, "tables": calls[0].tables, "calls": len(calls)}
        for plan in ["shardplan", *plans]:
            have = [c for c in calls if isinstance(c.get(f"{plan}_runs"), str)]
            if not have:
                continue
            if len({round(c[f"{plan}_predicted_ms"], 9) for c in have}) > 1:
                raise InputError("--pool", f"{task}: the {plan} plans differ between the calls (predicted costs "
                                 "differ)", "pool only calls that planned with the same model")
            row[f"{plan}_samples_per_s"] = statistics.median(runs_of(have, plan))
            row[f"{plan}_runs"] = json.dumps(runs_of(have, plan))
            row[f"{plan}_predicted_ms"] = have[0][f"{plan}_predicted_ms"]
            if plan != "shardplan":
                ours = statistics.median(runs_of(have, "shardplan"))
                row[f"time_ratio_vs_{plan}"] = row[f"{plan}_samples_per_s"] / ours
                row[f"predicted_ratio_vs_{plan}"] = row["shardplan_predicted_ms"] / row[f"{plan}_predicted_ms"]
        rows.append(row)
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", type=Path, default=Path("data/tasks/cpu-bench"))
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--peers", default="torchrec", help="comma-separated searchers to train against (default torchrec)")
    ap.add_argument("--max-ranks", type=at_least(1), default=2,
                    help="skip tasks with more ranks (one process per rank)")
    ap.add_argument("--iterations", type=at_least(1), default=60)
    ap.add_argument("--warmup", type=at_least(0), default=5)
    ap.add_argument("--rounds", type=at_least(1), default=3)
    ap.add_argument("--limit", type=at_least(1), help="only the first N eligible tasks")
    ap.add_argument("--name", default=None)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    ap.add_argument("--pool", help="train nothing: pool the runs of these earlier calls (comma-separated "
                    "names, as given to --name) into one table, written under --name")
    args = ap.parse_args()
    name = f"dmp-suite-{args.name or args.suite.name}"
    load_before = load1()
    partial = args.out / f"{name}.partial.csv"
    if args.pool:
        pooled = args.pool.split(",")
        df = pool([pd.read_csv(args.out / f"dmp-suite-{c}.csv") for c in pooled])
        peers = [c[len("time_ratio_vs_"):] for c in df if c.startswith("time_ratio_vs_")]
    else:
        pooled, peers = None, args.peers.split(",")
        for peer in peers:
            get_searcher(peer)  # an unknown name fails here, before any training
        estimator = load_estimator(args.profile)
        tasks = [t for t in map(load_task, sorted(args.suite.glob("*.json")))
                 if t.topology.world_size <= args.max_ranks]
        tasks = tasks[: args.limit]
        args.out.mkdir(parents=True, exist_ok=True)
        rows = resumable_rows(
            tasks, partial, {k: str(v) for k, v in vars(args).items() if k not in ("name", "out")},
            lambda task: [_run_task(task, estimator, peers, args.iterations, args.warmup, args.rounds)],
            f"dmp {args.suite.name}")
        df = pd.DataFrame(rows)
    text = _markdown(df, args, peers, load_before, pooled)
    write_results(df, text, args.out, name, partial)
    print(text)


if __name__ == "__main__":
    sys.exit(exit_status(main))
