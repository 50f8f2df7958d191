"""Does the reference workload see the slowdown a plan's ranks suffer? Time them side by side.

Every measurement divides a rank's time by the machine's slowdown read off a
small fixed reference workload (``kernel.REFERENCE_SPECS``) timed just before
and after it. That is only right when both slow down alike. This script plans
one task with one searcher, then times each rank ``--times`` times in turn,
each bracketed by the reference, and prints per timing: the raw rank ms, the
reference's slowdown against the profile's quiet reference, the rank divided
by it (what a measurement reports), and the cost model's prediction.
A rank whose divided time moves while the reference stays near quiet is slowed
by something the reference does not feel. Measured = real FBGEMM CPU kernels;
predicted = the profile's neural model. Writes
``bench/results/drift-probe-<task>.md``.

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 taskset -c 1 \\
        .venv/bin/python bench/drift_probe.py data/tasks/unseen-a/unseen-a-10.json
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
import torch
from tqdm import tqdm

from shardplan.argtypes import at_least
from shardplan.cost.estimator import load_estimator
from shardplan.cost.kernel import slowdown, time_specs_bracketed
from shardplan.cost.profiles import get_profile, load1, reference_ms
from shardplan.cost.specs import rank_specs
from shardplan.errors import InputError, exit_status
from shardplan.execute.measure import MEASURE_ID_SEED
from shardplan.formats import load_task, write_text_atomic
from shardplan.search import get_searcher
from provenance import provenance  # a sibling: bench/ is on sys.path when run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task", type=Path)
    ap.add_argument("--searcher", default="torchrec")
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--times", type=at_least(1), default=6)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args()
    profile = get_profile(args.profile)
    torch.set_num_threads(profile.threads or 1)
    quiet = reference_ms(profile)
    if not quiet:
        raise InputError("--profile", f"profile {args.profile} has no reference.json", "run `shardplan train` first")
    task = load_task(args.task)
    estimator = load_estimator(args.profile)
    plan = get_searcher(args.searcher).plan(task, estimator, seed=0)
    specs = rank_specs(plan)
    load_before = load1()
    rows = []
    for i in tqdm(range(args.times), desc="drift probe"):
        for r, rank in enumerate(specs):
            # One attempt, no retry: the point is to see every slowdown, not to avoid it.
            b = time_specs_bracketed(rank, task.optimizer, task.dtype, profile.device, MEASURE_ID_SEED,
                                     profile.warmup, profile.repeats)
            t = b.timing
            factor = slowdown(b.ref_before_ms, b.ref_after_ms, quiet)
            rows.append({"time": i, "rank": r, "raw_ms": t.fwd_ms + t.bwd_ms, "reference_slowdown": factor,
                         "divided_ms": (t.fwd_ms + t.bwd_ms) / factor,
                         "predicted_ms": plan.cost.per_rank[r].compute_ms})
    df = pd.DataFrame(rows)
    per_rank = df.groupby("rank").agg(raw_min=("raw_ms", "min"), raw_max=("raw_ms", "max"),
                                      slowdown_min=("reference_slowdown", "min"),
                                      slowdown_max=("reference_slowdown", "max"),
                                      divided_median=("divided_ms", "median"), divided_min=("divided_ms", "min"),
                                      predicted=("predicted_ms", "first"))
    md = "\n".join([f"# Drift probe: {args.searcher} plan of `{task.name}`", "",
                    *provenance(load_before, f"; quiet reference {quiet:.3f} ms."), "",
                    "Per rank over all timings:", "", per_rank.to_markdown(floatfmt=".2f"), "",
                    "Every timing:", "", df.to_markdown(index=False, floatfmt=".2f"), ""])
    print(md)
    write_text_atomic(args.out / f"drift-probe-{task.name}.md", md)


if __name__ == "__main__":
    sys.exit(exit_status(main))
