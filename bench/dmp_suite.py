"""Real training, not kernels alone: the default searcher's plans and TorchRec's, trained under DistributedModelParallel.

For every task of a suite with at most ``--max-ranks`` ranks (one gloo process per rank; this
machine has 2 cores, so 2-rank tasks give each process a core of its own), plan it with the
default searcher and with TorchRec's planner, both restricted to the sharding types gloo runs
(table-wise, column-wise, data-parallel), and train the task's DLRM with each plan as its
``ShardingPlan`` (``shardplan.execute.dmp.compare``: the two plans take turns, ``--rounds`` runs
each). Measured = wall-clock samples/s of the whole training iteration (embedding lookups,
all-to-all, dense layers, optimizer; the slowest rank's), median over the rounds; predicted = the
plans' cost blocks (the neural compute model plus the comm model), for context. Resumable: the
finished tasks of an interrupted run with the same settings are kept.

    .venv/bin/python bench/dmp_suite.py --suite data/tasks/cpu-bench --name cpu-bench
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from shardplan.cost.estimator import load_estimator
from shardplan.cost.profiles import load1
from shardplan.errors import InfeasibleError
from shardplan.execute.dmp import GLOO_TYPES, compare, torchrec_plan_for
from shardplan.formats import load_task, write_text_atomic
from shardplan.search import DEFAULT_SEARCHER, get_searcher
from provenance import provenance  # a sibling: bench/ is on sys.path when a script there runs


def _run_task(task, estimator, iterations: int, warmup: int, rounds: int) -> dict:
    row: dict = {"task": task.name, "ranks": task.topology.world_size, "tables": len(task.tables)}
    ours = get_searcher(DEFAULT_SEARCHER, frozenset(GLOO_TYPES)).plan(task, estimator, seed=0)
    try:
        theirs = torchrec_plan_for(task, "gloo")
    except InfeasibleError as e:
        return {**row, "error": f"torchrec: {e}"}
    results = compare({"shardplan": ours, "torchrec": theirs}, iterations, warmup, rounds, seed=0, backend="gloo")
    for name, plan in (("shardplan", ours), ("torchrec", theirs)):
        runs = results[name]
        row[f"{name}_samples_per_s"] = statistics.median(r.samples_per_s for r in runs)
        row[f"{name}_runs"] = json.dumps([round(r.samples_per_s, 1) for r in runs])
        row[f"{name}_loss_fell"] = all(r.loss_fell for r in runs)
        row[f"{name}_predicted_ms"] = plan.cost.max_ms
    # Iteration time ours over theirs: comparable with the bench's cost ratio (lower is better).
    row["time_ratio"] = row["torchrec_samples_per_s"] / row["shardplan_samples_per_s"]
    row["predicted_ratio"] = row["shardplan_predicted_ms"] / row["torchrec_predicted_ms"]
    return row


def _markdown(df: pd.DataFrame, args: argparse.Namespace, load_before: float) -> str:
    ok = df.dropna(subset=["time_ratio"])
    geo = lambda col: math.exp(sum(map(math.log, ok[col])) / len(ok)) if len(ok) else float("nan")  # noqa: E731
    cols = ["task", "ranks", "tables", "shardplan_samples_per_s", "torchrec_samples_per_s", "time_ratio",
            "predicted_ratio", "shardplan_loss_fell", "torchrec_loss_fell"]
    lines = [f"# DistributedModelParallel training: `{DEFAULT_SEARCHER}` plans against TorchRec's on `{args.suite}`",
             "", *provenance(load_before, f"; {args.iterations} timed iterations after {args.warmup} warm-up, "
                                          f"{args.rounds} interleaved runs per plan, gloo."), "",
             "Measured: samples/s of real multi-process TorchRec DistributedModelParallel training of the task's "
             "DLRM (one process per rank; the whole iteration, the slowest rank's wall clock), median over the "
             "runs. `time_ratio` = TorchRec's samples/s over ours (our iteration time over TorchRec's; < 1: "
             "ours trains faster). `predicted_ratio`: the plans' predicted costs (neural compute model + comm "
             "model), embedding part only. Both planners limited to gloo's sharding types.", "",
             f"**Geometric mean time ratio over {len(ok)} tasks: {geo('time_ratio'):.3f}** "
             f"(predicted, embedding part: {geo('predicted_ratio'):.3f}); ours faster on "
             f"{int((ok.time_ratio < 1).sum())} of {len(ok)}.", "",
             ok[cols].to_markdown(index=False, floatfmt=".3f"), ""]
    failed = df[df.time_ratio.isna()] if "time_ratio" in df else df
    if len(failed):
        lines += ["Not compared: " + "; ".join(f"{r.task} ({r.error})" for r in failed.itertuples()), ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", type=Path, default=Path("data/tasks/cpu-bench"))
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--max-ranks", type=int, default=2, help="skip tasks with more ranks (one process per rank)")
    ap.add_argument("--iterations", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--limit", type=int, help="only the first N eligible tasks")
    ap.add_argument("--name", default=None)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args()
    name = f"dmp-suite-{args.name or args.suite.name}"
    estimator = load_estimator(args.profile)
    tasks = [t for t in map(load_task, sorted(args.suite.glob("*.json"))) if t.topology.world_size <= args.max_ranks]
    tasks = tasks[: args.limit]
    settings = {k: str(v) for k, v in vars(args).items() if k not in ("name", "out")}
    partial, stamp = args.out / f"{name}.partial.csv", args.out / f"{name}.partial.json"
    rows = []
    if partial.exists() and stamp.exists() and json.loads(stamp.read_text()) == settings:
        rows = pd.read_csv(partial).to_dict("records")
        print(f"resuming: {len(rows)} task(s) done")
    args.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(stamp, json.dumps(settings))
    load_before = load1()
    done = {r["task"] for r in rows}
    for task in tqdm([t for t in tasks if t.name not in done], desc=f"dmp {args.suite.name}"):
        rows.append(_run_task(task, estimator, args.iterations, args.warmup, args.rounds))
        write_text_atomic(partial, pd.DataFrame(rows).to_csv(index=False))
    df = pd.DataFrame(rows)
    if "time_ratio" not in df:
        df["time_ratio"] = float("nan")
    df.to_csv(args.out / f"{name}.csv", index=False)
    text = _markdown(df, args, load_before)
    write_text_atomic(args.out / f"{name}.md", text)
    partial.unlink(missing_ok=True)
    stamp.unlink(missing_ok=True)
    print(text)


if __name__ == "__main__":
    main()
