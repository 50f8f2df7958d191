"""Does a plan's memory hold in a real trainer? Each plan's per-rank memory beside what TorchRec allocates.

For every task of a suite (any number of ranks: one gloo process per rank; nothing is timed, so
more processes than cores only makes it slower), plan it with the default searcher and with each
of ``--peers`` (default TorchRec's planner), all limited to the sharding types gloo runs, build the
task's DLRM under TorchRec's ``DistributedModelParallel`` with the plan and train a few iterations
(``shardplan.execute.dmp.train_with_plan``). Each process reports what TorchRec allocated for its
embedding shards (the FBGEMM ops' weights and optimizer state, the replicas' optimizer state) and
how far its resident memory peaked above where it stood before the model was built; the script
sets them beside the plan's own figures (``shardplan.memory.rank_memory``: weights, optimizer
state, and the per-batch buffers it budgets). Measured = bytes counted in the training processes;
the plan's = the memory model. Resumable.

    .venv/bin/python bench/dmp_memory.py --suite data/tasks/cpu-bench
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from shardplan.argtypes import at_least
from shardplan.cost.estimator import load_estimator
from shardplan.cost.profiles import load1
from shardplan.errors import exit_status
from shardplan.execute.bench import resumable_rows, write_results
from shardplan.execute.dmp import gloo_plans, memory_rows, train_with_plan
from shardplan.formats import load_task
from shardplan.search import DEFAULT_SEARCHER, get_searcher
from provenance import provenance  # a sibling: bench/ is on sys.path when a script there runs


def _task_rows(task, estimator, peers: list[str], iterations: int) -> list[dict]:
    plans, errors = gloo_plans(task, peers, estimator)
    rows = [{"task": task.name, "plan": peer, "error": why} for peer, why in errors.items()]
    for name, plan in plans.items():
        result = train_with_plan(plan, iterations=iterations, warmup=1, name=name)
        for r in memory_rows(plan, result):
            rows.append({"task": task.name, "plan": name, "ranks": task.topology.world_size, **r})
    return rows


def summary_lines(df: pd.DataFrame) -> list[str]:
    """The findings over every rank trained: agreement of what the trainer keeps, and the headroom used."""
    ok = df.dropna(subset=["rank"])
    if not len(ok):
        return ["No plan was trained."]
    keep_plan = ok.weights_plan + ok.optimizer_plan
    keep_torchrec = ok.weights_torchrec + ok.optimizer_torchrec
    agree = ok.kept_equal.astype(bool)  # exact bytes (the MiB columns are rounded)
    beyond = ok.peak_growth - ok.plan_total_with_buffers
    over = ok.peak_growth > ok.capacity
    lines = [f"**{len(ok)} ranks of {ok.groupby(['task', 'plan']).ngroups} plans ({ok.task.nunique()} tasks) "
             f"trained. Weights + optimizer state: the plan's figure equals TorchRec's allocation, to the byte, on "
             f"{int(agree.sum())} of {len(ok)} ranks** (largest difference "
             f"{(keep_plan - keep_torchrec).abs().max():.3f} MiB).", "",
             f"Peak resident growth of a training process beyond the plan's total (weights, optimizer "
             f"state and the buffers it budgets): median {beyond.median():.1f} MiB, 90th percentile "
             f"{beyond.quantile(0.9):.1f}, largest {beyond.max():.1f} (the plan's total is "
             f"{(ok.plan_total_with_buffers / ok.capacity).median():.0%} of capacity at the median rank, "
             f"{(ok.plan_total_with_buffers / ok.capacity).max():.0%} at most). Ranks whose peak growth exceeded "
             f"their capacity: {int(over.sum())} of {len(ok)}.", ""]
    by_plan = ok.assign(beyond=beyond, over=over).groupby("plan", sort=False).agg(
        ranks=("rank", "size"), beyond_median_mib=("beyond", "median"), beyond_max_mib=("beyond", "max"),
        over_capacity=("over", "sum"))
    return lines + [by_plan.reset_index().to_markdown(index=False, floatfmt=".1f"), ""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", type=Path, default=Path("data/tasks/cpu-bench"))
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--peers", default="torchrec", help="comma-separated searchers beside the default")
    ap.add_argument("--iterations", type=at_least(1), default=3, help="training iterations after one warm-up")
    ap.add_argument("--limit", type=at_least(1), help="only the first N tasks")
    ap.add_argument("--name", default=None)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args()
    peers = args.peers.split(",")
    for peer in peers:
        get_searcher(peer)  # an unknown name fails here, before any training
    name = f"dmp-memory-{args.name or args.suite.name}"
    load_before = load1()
    estimator = load_estimator(args.profile)
    tasks = list(map(load_task, sorted(args.suite.glob("*.json"))))[: args.limit]
    args.out.mkdir(parents=True, exist_ok=True)
    partial = args.out / f"{name}.partial.csv"
    rows = resumable_rows(tasks, partial, {k: str(v) for k, v in vars(args).items() if k not in ("name", "out")},
                          lambda task: _task_rows(task, estimator, peers, args.iterations),
                          f"dmp memory {args.suite.name}")
    df = pd.DataFrame(rows)
    if "rank" not in df:
        df["rank"] = pd.NA
    lines = [f"# Plan memory against TorchRec's allocation: `{DEFAULT_SEARCHER}` and {', '.join(peers)} on "
             f"`{args.suite}`", "",
             *provenance(load_before, f"; {args.iterations} training iterations after one warm-up per plan, gloo."),
             "", "Measured = bytes counted inside real multi-process TorchRec DistributedModelParallel training "
             "(the FBGEMM ops' weights and optimizer-state tensors, the replicas' optimizer state; the process's "
             "peak resident set, /proc VmHWM, less its resident set before the model was built). The plan's = "
             "`shardplan.memory` (weights + optimizer state + per-batch buffers). MiB. Every planner limited to "
             "gloo's sharding types.", "", *summary_lines(df)]
    per_plan = df.dropna(subset=["rank"]).groupby(["task", "plan"], sort=False).agg(
        ranks=("rank", "size"), plan_max_mib=("plan_total_with_buffers", "max"),
        peak_growth_max_mib=("peak_growth", "max"), capacity_mib=("capacity", "first"))
    lines += [per_plan.reset_index().to_markdown(index=False, floatfmt=".1f"), ""]
    if "error" in df and df.error.notna().any():
        lines += ["Not planned: " + "; ".join(f"{r.task} {r.plan} ({r.error})"
                                              for r in df[df.error.notna()].itertuples()), ""]
    text = "\n".join(lines)
    write_results(df, text, args.out, name, partial)
    print(text)


if __name__ == "__main__":
    sys.exit(exit_status(main))
