"""Two compute models' plans, measured interleaved with TorchRec's on real kernels.

For every task of a suite, the default searcher plans once with model A and
once with model B; both plans and TorchRec's go to one measurement call
(``measure_plans``: the ranks of all three take turns visit by visit and share
one divisor), so machine drift hits them alike. Reports each model's measured
plan cost over TorchRec's (geometric mean over the tasks TorchRec plans), B
over A on every task, and how many plans are balanced (measured max/mean at
most 1.10). Measured = real FBGEMM kernel times (comm from the comm model, as
in the bench); predicted = each model's own figure. Writes
``bench/results/model-ab-<name>.{md,csv}``.

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 taskset -c 1 \\
      .venv/bin/python bench/model_ab.py --a data/profiles/cpu-2c/compute-model.json --b NEW.json --name NAME

With ``--a-profile``/``--b-profile`` the two models may belong to different hardware profiles (each
plans with its own comm model), e.g. another CPU's profile against this host's own, measured here.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from shardplan.cost.estimator import load_estimator
from shardplan.cost.profiles import load1
from shardplan.errors import InputError, exit_status
from shardplan.execute.bench import geomean_vs
from shardplan.execute.measure import measure_plans
from shardplan.formats import load_task, write_text_atomic
from shardplan.search import DEFAULT_SEARCHER, get_searcher
from interleaved_args import add_interleaved_arguments  # siblings: bench/ is on sys.path when run
from provenance import provenance


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True, help="compute-model file A (e.g. the committed one)")
    ap.add_argument("--b", required=True, help="compute-model file B")
    ap.add_argument("--a-profile", help="the profile model A was trained for (default: --profile, the one "
                                        "measured on); another CPU's profile plans with its own comm model too")
    ap.add_argument("--b-profile", help="the same for model B")
    add_interleaved_arguments(ap)
    args = ap.parse_args()
    estimators = {"A": load_estimator(args.a_profile or args.profile, args.a),
                  "B": load_estimator(args.b_profile or args.profile, args.b)}
    load_before, rows = load1(), []
    for path in tqdm(sorted(Path(args.suite).glob("*.json")), desc=f"model A/B [{Path(args.suite).name}]"):
        task = load_task(path)
        plans = {k: get_searcher(DEFAULT_SEARCHER).plan(task, est, seed=0) for k, est in estimators.items()}
        try:
            plans["torchrec"] = get_searcher("torchrec").plan(task, estimators["A"], seed=0)
        except InputError:  # TorchRec finds no plan: the models are still compared
            pass
        costs = measure_plans(list(plans.values()), args.profile, rounds=args.rounds, visits=args.visits)
        for (who, plan), cost in zip(plans.items(), costs):
            rows.append({"task": task.name, "ranks": task.topology.world_size, "plan": who,
                         "measured_ms": cost.max_ms, "imbalance": cost.imbalance, "predicted_ms": plan.cost.max_ms,
                         "slowdown": cost.extra["slowdown"]})
    df = pd.DataFrame(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out / f"model-ab-{args.name}.csv", index=False)
    wide = df.pivot(index="task", columns="plan", values="measured_ms")
    imb = df.pivot(index="task", columns="plan", values="imbalance")
    by_plan = df.rename(columns={"plan": "searcher"})  # the bench's geometric means, with the plans as searchers
    vs_torchrec = geomean_vs(by_plan, "torchrec").set_index("searcher")
    summary = pd.DataFrame([{
        "model": k, "file": getattr(args, k.lower()), "profile": getattr(args, f"{k.lower()}_profile") or args.profile,
        "measured / TorchRec (geomean)": vs_torchrec.loc[k, "geomean_vs_torchrec"],
        "balanced (max/mean <= 1.10)": f"{int((imb[k] <= 1.10).sum())} of {len(imb)}"} for k in ("A", "B")])
    print(summary.to_string(index=False))
    b_over_a = geomean_vs(by_plan, "A").set_index("searcher").loc["B", "geomean_vs_A"]
    print(f"B over A, measured (geomean over {len(wide)} tasks): {b_over_a:.3f}")
    md = [f"# Model A/B on `{args.suite}`: {args.name}", "",
          *provenance(load_before, f"; divisor per task {df.slowdown.min():.2f}-{df.slowdown.max():.2f}x."), "",
          f"Plans of `{DEFAULT_SEARCHER}` under each model and TorchRec's plan, measured in one call per task "
          f"({args.rounds} rounds x {args.visits} visits, turns by visit): real FBGEMM CPU kernel times on "
          f"profile `{args.profile}`'s measurement protocol, comm from its comm model. "
          f"{vs_torchrec.loc['torchrec', 'tasks_planned']} tasks TorchRec plans. "
          f"B over A, measured: **{b_over_a:.3f}** "
          f"(geomean over {len(wide)} tasks).", "",
          summary.to_markdown(index=False, floatfmt=".3f"), "",
          wide.join(imb.add_suffix(" imbalance")).to_markdown(floatfmt=".3f"), ""]
    write_text_atomic(args.out / f"model-ab-{args.name}.md", "\n".join(md))
    print(f"wrote {args.out / f'model-ab-{args.name}.md'}")


if __name__ == "__main__":
    sys.exit(exit_status(main))
