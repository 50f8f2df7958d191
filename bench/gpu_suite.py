"""Every searcher's plans of a suite, trained in the emulated-rank DLRM loop; samples/s and embedding time.

On a GPU profile (``h100``/``h200``) this is the GPU benchmark: TorchRec's
plan (planned for ``cuda``, where it may propose row-wise) and shardplan's,
each trained in :func:`shardplan.execute.dlrm_loop.run_loop` on the GPU. Two
stages, so that GPU time goes to measuring: ``plan`` runs here (TorchRec's
planner and the cost models run on CPU; the GPU machine has no TorchRec) and
``run`` on the GPU machine with the plans carried. Its CPU twin
(``--profile cpu-2c``) is what the tests run. Prints a table; writes
``<out>/gpu-suite-<profile>.{csv,md}``.

    python bench/gpu_suite.py plan --profile h200 --plans build/gpu-plans        # here
    python3 bench/gpu_suite.py run --profile h200 --plans build/gpu-plans --out $OUT   # on the GPU
"""
from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

import numpy as np
import pandas as pd

from shardplan.cost.estimator import load_estimator
from shardplan.cost.profiles import machine_stamp
from shardplan.errors import InputError
from shardplan.execute.dlrm_loop import run_loop
from shardplan.formats import load_plan, load_task, save_plan
from shardplan.search import get_searcher

DEFAULT_SEARCHERS = "torchrec,neuroshard,neuroshard-tw,greedy-cost,greedy-lookup,greedy-size"


def plan_suite(profile: str, suite: Path, searchers: list[str], out: Path) -> list[dict]:
    """Plan every task with every searcher (on this machine: TorchRec and the cost models run on CPU)."""
    est = load_estimator(profile)
    out.mkdir(parents=True, exist_ok=True)
    skipped = []
    for path in sorted(suite.glob("*.json")):
        task = load_task(path)
        for name in searchers:
            try:
                save_plan(get_searcher(name).plan(task, est), out / f"{task.name}--{name}.json")
            except InputError as e:
                skipped.append({"task": task.name, "searcher": name, "planned": False, "error": str(e)[:200]})
    return skipped


def run_suite(profile: str, plans: Path, iterations: int) -> pd.DataFrame:
    """Train every plan in the emulated-rank loop on this machine's device."""
    est = load_estimator(profile)
    rows = []
    for path in sorted(plans.glob("*--*.json")):
        plan = load_plan(path)
        name = plan.search["searcher"]
        r = run_loop(plan, profile, est, iterations=iterations, name=name)
        rows.append({"task": plan.task.name, "searcher": name, "planned": True, "ranks": plan.task.topology.world_size,
                     "embedding_ms": r.embedding_ms, "dense_ms": r.dense_ms, "iteration_ms": r.iteration_ms,
                     "samples_per_s": r.samples_per_s, "predicted_ms": max(r.predicted_rank_ms),
                     "rank_imbalance": r.embedding_ms / np.mean(
                         [f + b + c for f, b, c in zip(r.rank_fwd_ms, r.rank_bwd_ms, r.rank_comm_ms)]),
                     "loss_first": r.losses[0], "loss_last": r.losses[-1], "planning_s": plan.search["seconds"],
                     "device": r.device})
    return pd.DataFrame(rows)


def report(df: pd.DataFrame, profile: str, out: Path) -> str:
    stem = out / f"gpu-suite-{profile}"
    df.to_csv(stem.with_suffix(".csv"), index=False)
    lines = [f"# Emulated-rank DLRM loop on `{profile}` ({dt.date.today()}, {machine_stamp()['cpu_model']})", "",
             "Embedding time = slowest rank's measured fwd+bwd + modelled comm; samples/s over the whole "
             "iteration (dense part included).", "",
             "| searcher | tasks | geomean embedding time / TorchRec's | median samples/s |", "| --- | --- | --- | --- |"]
    if len(df) and "torchrec" in set(df.searcher):
        base = df[df.searcher == "torchrec"].set_index("task").embedding_ms
        for name, g in df.groupby("searcher"):
            common = g[g.task.isin(base.index)]
            ratio = float(np.exp(np.mean(np.log(common.embedding_ms.to_numpy() / base[common.task].to_numpy()))))
            lines.append(f"| {name} | {len(g)} | {ratio:.3f} | {g.samples_per_s.median():.0f} |")
    text = "\n".join(lines) + "\n"
    stem.with_suffix(".md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stage", choices=["plan", "run"])
    ap.add_argument("--profile", default="h200")
    ap.add_argument("--suite", default="data/tasks/gpu-bench")
    ap.add_argument("--searchers", default=DEFAULT_SEARCHERS)
    ap.add_argument("--plans", default="build/gpu-plans", help="where `plan` writes and `run` reads the plans")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args(argv)
    if args.stage == "plan":
        skipped = plan_suite(args.profile, Path(args.suite), args.searchers.split(","), Path(args.plans))
        print(f"planned into {args.plans}; not planned: {skipped}")
    else:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        print(report(run_suite(args.profile, Path(args.plans), args.iterations), args.profile, out))


if __name__ == "__main__":
    main()
