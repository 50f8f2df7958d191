"""The default searcher against TorchRec with every rank neighbour-calibrated: the bench's bars on the host
the cost data describes.

``shardplan bench`` divides every rank of a task by one reference slowdown. On
a host that slows short ranks more than long ones that flatters TorchRec's
lopsided plans, whose slowest rank is usually one long rank
(``bench/work_bias.py``). Here each rank of both plans is measured by
neighbour calibration (:func:`shardplan.execute.measure.measure_plan_calibrated`:
timed beside stored ranks like it, divided by their measured-over-label
ratio), so every rank's figure is on the labels' host whatever the machine
does meanwhile. Per task: both plans' measured cost (slowest rank's compute
plus comm from the comm model), imbalance (max/mean) and predicted cost; then
the geometric mean of the default's cost over TorchRec's on the tasks TorchRec
plans, and how many default plans have max/mean <= 1.10. Measured: real
FBGEMM CPU kernels; predicted: the committed neural model. Writes
``bench/results/calibrated-ratio-<profile>-<suite>.{md,csv}`` (or ``--name``).

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 taskset -c 1 \\
        .venv/bin/python bench/calibrated_ratio.py --suite data/tasks/unseen-a
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from shardplan.argtypes import at_least
from shardplan.cost.estimator import load_estimator
from shardplan.cost.profiles import load1
from shardplan.errors import InputError, exit_status
from shardplan.execute.measure import measure_plan_calibrated
from shardplan.formats import load_task, write_text_atomic
from shardplan.search import DEFAULT_SEARCHER, get_searcher
from provenance import provenance  # a sibling: bench/ is on sys.path when run

BALANCED = 1.10


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="data/tasks/unseen-a")
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--rounds", type=at_least(1), default=1)
    ap.add_argument("--name", help="output file stem (default calibrated-ratio-PROFILE-SUITE)")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    est = load_estimator(args.profile)
    load_before = load1()
    rows = []
    for path in tqdm(sorted(Path(args.suite).glob("*.json")), desc="tasks"):
        task = load_task(path)
        for name in ("torchrec", DEFAULT_SEARCHER):
            try:
                plan = get_searcher(name).plan(task, est)
            except InputError:
                continue
            m = measure_plan_calibrated(plan, args.profile, args.rounds)
            rows.append({"task": task.name, "searcher": name, "ranks": task.topology.world_size,
                         "measured_ms": m.max_ms, "imbalance": m.imbalance, "predicted_ms": plan.cost.max_ms,
                         "reference_slowdown": m.extra["reference_slowdown"],
                         "measured_rank_compute_ms": [round(r.compute_ms, 4) for r in m.per_rank]})
    df = pd.DataFrame(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = args.name or f"calibrated-ratio-{args.profile}-{Path(args.suite).name}"
    df.to_csv(out / f"{stem}.csv", index=False)
    wide = df.pivot(index="task", columns="searcher", values=["measured_ms", "predicted_ms", "imbalance"])
    both = wide.dropna(subset=[("measured_ms", "torchrec"), ("measured_ms", DEFAULT_SEARCHER)])
    ratio = np.exp(np.mean(np.log(both[("measured_ms", DEFAULT_SEARCHER)] / both[("measured_ms", "torchrec")])))
    pratio = np.exp(np.mean(np.log(both[("predicted_ms", DEFAULT_SEARCHER)] / both[("predicted_ms", "torchrec")])))
    ours = df[df.searcher == DEFAULT_SEARCHER]
    balanced = int((ours.imbalance <= BALANCED).sum())
    md = [f"# `{DEFAULT_SEARCHER}` against TorchRec on `{args.suite}`, every rank neighbour-calibrated", "",
          *provenance(load_before, f"; the reference read {df.reference_slowdown.median():.2f}x "
          f"quiet (median over plans). Measured: per-rank compute on real FBGEMM CPU kernels, each rank timed "
          f"beside stored ranks like it and divided by their measured-over-label ratio ({args.rounds} round(s)), "
          "plus comm from the comm model; predicted: the committed neural model plus the same comm model."), "",
          f"**{DEFAULT_SEARCHER} / TorchRec: {ratio:.3f}** measured (predicted {pratio:.3f}), geometric mean over "
          f"the {len(both)} tasks TorchRec plans; {DEFAULT_SEARCHER} balanced (max/mean <= {BALANCED}) on "
          f"{balanced} of {len(ours)} tasks.", "",
          "| task | ranks | TorchRec ms | TorchRec max/mean | default ms | default max/mean | default / TorchRec |",
          "| --- | --- | --- | --- | --- | --- | --- |"]
    for t, g in df.groupby("task"):
        tr = g[g.searcher == "torchrec"]
        ns = g[g.searcher == DEFAULT_SEARCHER].iloc[0]
        cells = (f"{tr.measured_ms.iloc[0]:.2f} | {tr.imbalance.iloc[0]:.3f}" if len(tr) else "- | -")
        r = f"{ns.measured_ms / tr.measured_ms.iloc[0]:.3f}" if len(tr) else "-"
        md.append(f"| {t} | {ns.ranks} | {cells} | {ns.measured_ms:.2f} | {ns.imbalance:.3f} | {r} |")
    write_text_atomic(out / f"{stem}.md", "\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    sys.exit(exit_status(main))
