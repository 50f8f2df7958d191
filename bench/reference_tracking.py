"""Does the reference workload track the slowdown of the ranks it divides?

Every plan measurement divides kernel times by the machine's slowdown, read
off a small fixed reference workload (``kernel.time_reference``). Until
2026-11-22 each visit of a rank was divided by the references read just
before and after it. This script checks what that division does to the
figures: it builds the ranks of each task's TorchRec plan once, visits them in
turn ``--sweeps`` times (1 warm-up and ``--repeats`` timed iterations a visit,
the reference read before and after each), and then forms 4-visit estimates of
every rank three ways:

- ``raw``: median raw ms over the group's visits (no division);
- ``per-visit``: each visit divided by its own references (the old protocol);
- ``plan-wide``: the raw median divided by the median of every reference read
  during the group, one divisor for all of the plan's ranks (the new protocol).

It reports, per task, the spread (sd of log) of a rank's estimate from group
to group and of the ratio of two ranks' estimates (what imbalance and the
plan-over-plan ratios are made of), and the correlation of a visit's raw time
with its references. Measured on real FBGEMM CPU kernels; no model involved.

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 taskset -c 1 \\
        .venv/bin/python bench/reference_tracking.py --tasks cpu-bench-15,cpu-bench-03 --sweeps 24
"""
from __future__ import annotations

import argparse
import datetime as dt
import itertools
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from shardplan.argtypes import at_least
from shardplan.cost.estimator import load_estimator
from shardplan.cost.kernel import RankOp, slowdown, time_bracketed
from shardplan.cost.profiles import get_profile, load1, reference_ms
from shardplan.cost.specs import rank_specs
from shardplan.errors import exit_status
from shardplan.execute.measure import MEASURE_ID_SEED
from shardplan.formats import load_task, write_text_atomic
from shardplan.search import get_searcher

GROUP = 4  # visits per estimate, as `--visits 4`
RESULTS = Path(__file__).parent / "results"


def sweep(task_path: Path, sweeps: int, repeats: int, profile_name: str) -> pd.DataFrame:
    """Raw ms and the references around it, per visit of each rank of the task's TorchRec plan."""
    profile = get_profile(profile_name)
    plan = get_searcher("torchrec").plan(load_task(task_path), load_estimator(profile_name))
    ops = [RankOp(s, plan.task.optimizer, plan.task.dtype, profile.device, MEASURE_ID_SEED)
           for s in rank_specs(plan) if s]
    for op in ops:
        op.run(profile.warmup, 1)
    rows = []
    for v, (r, op) in tqdm(list(itertools.product(range(sweeps), enumerate(ops))), desc=task_path.stem,
                           leave=False):
        b = time_bracketed(lambda: op.run(1, repeats), profile.device)
        rows.append({"task": task_path.stem, "sweep": v, "rank": r,
                     "raw_ms": b.timing.fwd_ms + b.timing.bwd_ms,
                     "ref_before_ms": b.ref_before_ms, "ref_after_ms": b.ref_after_ms})
    return pd.DataFrame(rows)


def estimates(d: pd.DataFrame, quiet_ms: float) -> pd.DataFrame:
    """GROUP-visit estimates of every rank, per group of sweeps, by the three divisors."""
    d = d.assign(group=d.sweep // GROUP,
                 visit_slowdown=slowdown(d.ref_before_ms, d.ref_after_ms, quiet_ms))
    out = []
    for g, x in d.groupby("group"):
        if x.sweep.nunique() < GROUP:
            continue
        plan_slowdown = float(np.median(np.r_[x.ref_before_ms, x.ref_after_ms])) / quiet_ms
        for r, y in x.groupby("rank"):
            out.append({"group": g, "rank": r, "raw": y.raw_ms.median(),
                        "per-visit": (y.raw_ms / y.visit_slowdown).median(),
                        "plan-wide": y.raw_ms.median() / plan_slowdown})
    return pd.DataFrame(out)


def summarise(d: pd.DataFrame, quiet_ms: float) -> dict:
    e = estimates(d, quiet_ms)
    wide = {k: e.pivot(index="group", columns="rank", values=k) for k in ("raw", "per-visit", "plan-wide")}
    ranks = sorted(e["rank"].unique())
    row = {"task": d.task.iloc[0], "ranks": len(ranks), "sweeps": d.sweep.nunique(),
           "ref_slowdown_median": float(np.median(np.r_[d.ref_before_ms, d.ref_after_ms]) / quiet_ms),
           "corr_log_raw_ref": float(np.corrcoef(np.log(d.raw_ms),
                                                 np.log((d.ref_before_ms + d.ref_after_ms) / 2))[0, 1])}
    for k, w in wide.items():
        row[f"rank_sd_{k}"] = float(np.mean([np.log(w[r]).std() for r in ranks]))
        pairs = [np.log(w[a] / w[b]).std() for a, b in itertools.combinations(ranks, 2)]
        row[f"pair_sd_{k}"] = float(np.mean(pairs)) if pairs else float("nan")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default="data/tasks/cpu-bench")
    ap.add_argument("--tasks", default="cpu-bench-15,cpu-bench-03", help="comma-separated task names")
    ap.add_argument("--sweeps", type=at_least(1), default=24)
    ap.add_argument("--repeats", type=at_least(1), default=3, help="timed iterations per visit")
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--name", default="reference-tracking-cpu-2c")
    args = ap.parse_args()
    profile = get_profile(args.profile)
    profile.use_threads()
    quiet = reference_ms(profile)
    load_before, started = load1(), dt.datetime.now(dt.timezone.utc)
    raw = pd.concat([sweep(Path(args.suite) / f"{t}.json", args.sweeps, args.repeats, args.profile)
                     for t in args.tasks.split(",")])
    table = pd.DataFrame([summarise(x, quiet) for _, x in raw.groupby("task", sort=False)])
    RESULTS.mkdir(exist_ok=True)
    raw.to_csv(RESULTS / f"{args.name}.csv", index=False)
    md = [f"# Does the reference track the ranks? `{args.tasks}` on `{args.profile}`", "",
          f"{started:%Y-%m-%d %H:%M} UTC, load {load_before:.2f} before, {load1():.2f} after. "
          f"Measured: TorchRec's plan of each task, its ranks built once and visited in turn "
          f"{args.sweeps} times (1 warm-up + {args.repeats} timed iterations a visit, the reference "
          f"before and after each; quiet reference {quiet:.3f} ms). Estimates are of {GROUP} visits, "
          "as `--visits 4`. `rank_sd_*`: sd of log of a rank's estimate from group to group (mean "
          "over ranks); `pair_sd_*`: the same for the ratio of two ranks' estimates (mean over "
          "pairs). `raw`: no division; `per-visit`: each visit divided by its own references (the "
          "protocol before 2026-11-22); `plan-wide`: one divisor, the median reference of the group, "
          "for all ranks.", "",
          f"Command: `python bench/reference_tracking.py --tasks {args.tasks} --sweeps {args.sweeps} "
          f"--repeats {args.repeats} --name {args.name}`", "",
          table.to_markdown(index=False, floatfmt=".3f"), ""]
    write_text_atomic(RESULTS / f"{args.name}.md", "\n".join(md))
    print(table.to_markdown(index=False, floatfmt=".3f"))


if __name__ == "__main__":
    sys.exit(exit_status(main))
