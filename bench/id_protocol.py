"""Does timing one repeated batch of ids flatter some plans? Repeated ids against fresh ids per iteration.

DESIGN.md's protocol, and every committed timing, look up the same batch of
ids in every timed iteration (after warm-up). Training draws a new batch each
iteration: the hot rows stay the same (the id law and its scatter over the rows
are fixed per table), but the cold rows touched differ, so a table whose
touched rows fit in the last-level cache is warm under repeated ids and partly
cold in training. If that favoured one planner's grouping of tables over
another's, the bench's ratio would be an artefact of the protocol.

For every task of a suite that all ``--searchers`` plan, each plan's ranks are
built once with ``--id-batches`` draws of their lookups (seeds
``MEASURE_ID_SEED + k``: same hot rows, other ids) and timed both ways on the
same ops: ``repeated`` (batch 0 every iteration) and ``fresh`` (iteration i
looks up batch i mod k). Per round every rank of every plan is timed under
both, the order of the two alternating by round, ``--rounds`` times; a rank's
figure is its median over rounds, raw ms (the plans of a task share the
machine's state, so ratios between them are taken within the task). A plan's
cost is its slowest rank's measured compute plus its predicted comm (the
fitted gloo model), as in the bench; predicted = the committed neural model.
Writes ``bench/results/id-protocol-<name>.{md,csv}``.

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 taskset -c 1 \\
      .venv/bin/python bench/id_protocol.py --suite data/tasks/cpu-bench --name cpu-bench
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
from shardplan.cost.kernel import RankOp, time_reference
from shardplan.cost.profiles import get_profile, load1, reference_ms
from shardplan.cost.specs import rank_specs
from shardplan.errors import InputError, exit_status
from shardplan.execute.bench import geomean_vs
from shardplan.execute.measure import MEASURE_ID_SEED
from shardplan.formats import load_task, write_text_atomic
from shardplan.search import DEFAULT_SEARCHER, get_searcher
from provenance import provenance  # a sibling: bench/ is on sys.path when run

PROTOCOLS = ("repeated", "fresh")


def time_task(plans: dict, profile, id_batches: int, rounds: int) -> tuple[list[dict], list[float]]:
    """Every rank of every plan under both protocols, ``rounds`` times; one row per rank and protocol."""
    ops = {name: [RankOp(s, p.task.optimizer, p.task.dtype, profile.device, MEASURE_ID_SEED, id_batches)
                  for s in rank_specs(p)] for name, p in plans.items()}
    runs: dict[tuple, list[float]] = {}
    refs = []
    for rnd in range(rounds):
        refs.append(time_reference(profile.device))
        order = PROTOCOLS if rnd % 2 == 0 else PROTOCOLS[::-1]
        for name, rank_ops in ops.items():
            for r, op in enumerate(rank_ops):
                for proto in order:
                    t = op.run(profile.warmup, profile.repeats, 1 if proto == "repeated" else id_batches)
                    runs.setdefault((name, r, proto), []).append(t.fwd_ms + t.bwd_ms)
    rows = []
    for name, p in plans.items():
        for r, rc in enumerate(p.cost.per_rank):
            for proto in PROTOCOLS:
                rows.append({"task": p.task.name, "ranks": p.task.topology.world_size, "searcher": name, "rank": r,
                             "protocol": proto, "measured_ms": float(np.median(runs[(name, r, proto)])),
                             "predicted_ms": rc.compute_ms, "comm_ms": rc.comm_ms})
    return rows, refs


def plan_costs(df: pd.DataFrame) -> pd.DataFrame:
    """Per task, searcher and protocol: slowest rank's measured compute + comm, and the predicted cost."""
    df = df.assign(cost=df.measured_ms + df.comm_ms, pred_cost=df.predicted_ms + df.comm_ms)
    return df.groupby(["task", "ranks", "searcher", "protocol"], as_index=False).agg(
        measured_ms=("cost", "max"), predicted_ms=("pred_cost", "max"))


def within_plan_sd(df: pd.DataFrame) -> pd.Series:
    """Per searcher and protocol: sd of log(measured / predicted) over ranks, less each plan's mean."""
    e = np.log(df.measured_ms / df.predicted_ms)
    within = e - e.groupby([df.task, df.searcher, df.protocol]).transform("mean")
    return within.groupby([df.searcher, df.protocol]).std()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="data/tasks/cpu-bench")
    ap.add_argument("--searchers", default=f"torchrec,{DEFAULT_SEARCHER}", help="the first is the peer of the ratios")
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--id-batches", type=at_least(1), default=4, help="draws the fresh protocol cycles through")
    ap.add_argument("--rounds", type=at_least(1), default=3)
    ap.add_argument("--limit", type=at_least(1), default=None, help="first N tasks only")
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args()
    if args.id_batches < 2 or args.rounds < 1:
        ap.error("--id-batches must be at least 2 and --rounds at least 1")
    profile = get_profile(args.profile)
    profile.use_threads()
    est = load_estimator(args.profile)
    peer, *others = args.searchers.split(",")
    quiet, load_before = reference_ms(profile), load1()
    rows, slowdowns = [], []
    for path in tqdm(sorted(Path(args.suite).glob("*.json"))[: args.limit], desc="id protocol"):
        task = load_task(path)
        try:
            plans = {name: get_searcher(name).plan(task, est, seed=0) for name in (peer, *others)}
        except InputError:
            continue  # a searcher cannot plan it (TorchRec, on tasks with a table over a rank's memory)
        task_rows, refs = time_task(plans, profile, args.id_batches, args.rounds)
        rows += task_rows
        slowdowns += [r / quiet for r in refs]
    if not rows:
        raise InputError("--searchers", f"no task of {args.suite} is planned by every one of {args.searchers}",
                         "leave out a searcher that cannot plan these tasks")
    df = pd.DataFrame(rows)
    costs = plan_costs(df)
    wide = costs.pivot_table(index=["task", "ranks"], columns=["searcher", "protocol"], values="measured_ms")
    pred = costs[costs.protocol == "repeated"].pivot_table(index="task", columns="searcher", values="predicted_ms")
    table = pd.DataFrame(index=wide.index)
    for s in others:
        for proto in PROTOCOLS:
            table[f"{s} / {peer}, {proto}"] = wide[(s, proto)] / wide[(peer, proto)]
        table[f"{s} / {peer}, predicted"] = (pred[s] / pred[peer]).reindex(wide.index.get_level_values(0)).values
    ratio = f"geomean_vs_{peer}"
    of = lambda proto, column="measured_ms": (  # noqa: E731
        geomean_vs(costs[costs.protocol == proto], peer, column).set_index("searcher")[ratio])
    summary = pd.DataFrame({**{proto: of(proto) for proto in PROTOCOLS},
                            "predicted": of("repeated", "predicted_ms")}).drop(index=peer).reset_index()
    for s in (peer, *others):
        table[f"{s}: fresh / repeated"] = wide[(s, "fresh")] / wide[(s, "repeated")]
    sd = within_plan_sd(df).unstack()[list(PROTOCOLS)]
    stem = args.out / f"id-protocol-{args.name}"
    args.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(stem.with_suffix(".csv"), df.to_csv(index=False))
    md = [f"# Repeated ids against fresh ids per iteration: `{args.suite}` ({args.name})", "",
          *provenance(load_before, f"; reference slowdown {min(slowdowns):.2f}-{max(slowdowns):.2f}x "
                      f"(median {np.median(slowdowns):.2f}x)."), "",
          f"Measured: real FBGEMM CPU kernels, each rank's fwd+bwd compute (median of {args.rounds} rounds, raw ms) "
          f"plus the fitted gloo model's comm; predicted: the committed neural `{args.profile}` model. `repeated`: "
          f"the committed protocol (one batch of ids every iteration); `fresh`: {args.id_batches} draws cycled, "
          f"as training does. {len(table)} tasks that every searcher plans.", "",
          "Geometric means of the plan-cost ratios:", "", summary.to_markdown(index=False, floatfmt=".3f"),
          "", "Each plan's ranks: sd of log(measured / predicted) less the plan's mean (the model's error within a "
          "plan, with the instrument's):", "", sd.to_markdown(floatfmt=".3f"), "",
          "Per task:", "", table.reset_index().to_markdown(index=False, floatfmt=".3f"), ""]
    write_text_atomic(stem.with_suffix(".md"), "\n".join(md))
    print("\n".join(md))
    print(f"wrote {stem}.md and .csv")


if __name__ == "__main__":
    sys.exit(exit_status(main))
