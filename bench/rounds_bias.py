"""How a plan's measured cost depends on how many measurement rounds the bench takes.

A plan's measured cost is the slowest rank's: the maximum, over ranks, of
each rank's measured figure (its median round). Every rank's figure carries
instrument noise (one 2-round figure moved by 1.4-3.0% sd between rounds in
the committed benches), and the maximum of noisy figures sits above the
maximum of the true ones by about as much as the noise, times a factor that
grows with the number of ranks *close to* the maximum. A balanced plan has
all its ranks there; a plan with one dominant rank has one. So the bench's
estimator is biased against balanced plans, the more the fewer rounds it takes.

This script takes a bench results file measured with many rounds (each rank's
every round is kept: ``measured_rank_rounds_ms``) and recomputes each plan's
measured cost as if only ``k`` rounds had been taken (every subset of ``k``
rounds, averaged; at most ``--subsets`` of them, seeded), for every ``k``, and
reports each searcher's geometric mean over the reference's (TorchRec's).
It also gives the cross-fitted figure: the slowest rank chosen on half the
rounds and valued on the other half, which is biased the other way (below
the true maximum when ranks are close). The truth lies between the two.

Comm is the comm model's, as in the bench: read from the file's
``rank_comm_ms`` (bench runs since 2026-11-23 08:00 UTC), or, for older
files, from the plans planned again (the searchers are seeded), whose
predicted compute is then checked against the file's.

    .venv/bin/python bench/rounds_bias.py bench/results/bench-cpu-2c-cpu-bench-rounds6.csv
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from shardplan.argtypes import at_least
from shardplan.cost.estimator import PlanEstimator, load_estimator
from shardplan.cost.profiles import load1
from shardplan.errors import InputError, exit_status
from shardplan.execute.bench import REFERENCE, geomean_vs
from shardplan.formats import load_task, write_text_atomic
from shardplan.search import get_searcher
from provenance import provenance  # a sibling: bench/ is on sys.path when run


def subsets(n: int, k: int, limit: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """Every ``k``-subset of ``range(n)``, or ``limit`` distinct ones drawn at random where there are more."""
    if math.comb(n, k) <= limit:
        return list(itertools.combinations(range(n), k))
    seen: set[tuple[int, ...]] = set()
    while len(seen) < limit:
        seen.add(tuple(sorted(rng.choice(n, k, replace=False).tolist())))
    return sorted(seen)


def plan_cost(rounds: np.ndarray, comm: np.ndarray, pick: tuple[int, ...]) -> float:
    """The bench's figure from the rounds in ``pick``: max over ranks of median round + comm."""
    return float(np.max(np.median(rounds[:, list(pick)], axis=1) + comm))


def cross_fitted(rounds: np.ndarray, comm: np.ndarray, splits: list[tuple[int, ...]]) -> float:
    """The slowest rank chosen on each split's rounds, valued on the rest (mean over splits)."""
    n = rounds.shape[1]
    values = []
    for a in splits:
        b = [i for i in range(n) if i not in a]
        slowest = int(np.argmax(np.median(rounds[:, list(a)], axis=1) + comm))
        values.append(float(np.median(rounds[slowest, b]) + comm[slowest]))
    return float(np.mean(values))


def replanned_comm(r: pd.Series, suite: Path, est: PlanEstimator) -> np.ndarray:
    """Per-rank comm of a bench row written before the bench kept it: the plan planned again."""
    plan = get_searcher(r.searcher).plan(load_task(suite / f"{r.task}.json"), est, seed=0)
    predicted = np.array([c.compute_ms for c in plan.cost.per_rank])
    if not np.allclose(predicted, json.loads(r.predicted_rank_compute_ms), rtol=1e-3, atol=1e-3):
        raise InputError("--model", f"{r.task}/{r.searcher}: the plan planned now is not the bench's (its "
                         "predicted compute differs)", "pass the bench's --model")
    return np.array([c.fwd_comm_ms + c.bwd_comm_ms for c in plan.cost.per_rank])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="a bench results CSV measured with several rounds")
    ap.add_argument("--suite", type=Path, default=Path("data/tasks/cpu-bench"))
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--model", help="the compute model the bench planned with (default: the profile's)")
    ap.add_argument("--subsets", type=at_least(1), default=50, help="at most this many round subsets per k")
    ap.add_argument("--seed", type=at_least(0), default=0)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args()
    load_before = load1()
    df = pd.read_csv(args.results)
    df = df[df.measured_rank_rounds_ms.notna()]
    est: PlanEstimator | None = None  # only older results files, without per-rank comm, need it
    rng = np.random.default_rng(args.seed)
    n_rounds = min(len(json.loads(s)[0]) for s in df.measured_rank_rounds_ms)
    rows = []
    for _, r in df.iterrows():
        if isinstance(r.get("rank_comm_ms"), str):
            comm = np.array(json.loads(r.rank_comm_ms))
        else:
            est = est or load_estimator(args.profile, args.model)
            comm = replanned_comm(r, args.suite, est)
        rounds = np.array([x[:n_rounds] for x in json.loads(r.measured_rank_rounds_ms)])
        row = {"task": r.task, "searcher": r.searcher, "ranks": len(comm)}
        for k in range(1, n_rounds + 1):
            row[f"k{k}"] = float(np.mean([plan_cost(rounds, comm, p) for p in subsets(n_rounds, k, args.subsets, rng)]))
        row["cross_fitted"] = cross_fitted(rounds, comm, subsets(n_rounds, n_rounds // 2, args.subsets, rng))
        rows.append(row)
    per_plan = pd.DataFrame(rows)
    columns = [f"k{k}" for k in range(1, n_rounds + 1)] + ["cross_fitted"]
    ratios = [geomean_vs(per_plan, column=c).set_index("searcher") for c in columns]
    summary = pd.DataFrame({"tasks": ratios[0]["tasks_compared"],
                            **{c: r[f"geomean_vs_{REFERENCE}"] for c, r in zip(columns, ratios)}})
    summary = summary.drop(index=REFERENCE).reset_index().rename(columns={f"k{k}": f"{k} round{'s' if k > 1 else ''}"
                                                  for k in range(1, n_rounds + 1)})
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"rounds-bias-{args.results.stem}"
    write_text_atomic(args.out / f"{stem}.csv", per_plan.to_csv(index=False))
    md = [f"# Measured plan cost over {REFERENCE}'s, by measurement rounds: `{args.results}`", "",
          *provenance(load_before), "",
          f"Measured (real kernels, the bench's file; comm from the comm model). Each column recomputes every "
          f"plan's cost from `k` of its {n_rounds} rounds (each rank's median round, max over ranks; "
          f"the mean over up to {args.subsets} subsets of rounds), then the geometric mean over "
          f"{REFERENCE}'s plan on the tasks it plans. `cross_fitted`: the slowest rank chosen on half "
          f"the rounds, valued on the other half (biased low where ranks are close; the plain maximum "
          f"is biased high).", "", summary.to_markdown(index=False, floatfmt=".3f")]
    write_text_atomic(args.out / f"{stem}.md", "\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    sys.exit(exit_status(main))
