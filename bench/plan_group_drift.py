"""How far a plan's rank-to-rank structure moves from one timing of it to the next, hours or days apart.

A plan group is one task's plans timed together (``shardplan collect ranks
--visits``): one divisor per task, so only the ratios of its ranks are labels.
TorchRec's plans do not depend on our model, so every collection of the same
tasks timed the very same ranks. Per pair of collections, this script takes
each rank's log time less its plan's mean in both and reports the scatter of
the difference per collection (sd / sqrt 2): the instrument's repeatability
of a plan's structure, the same day or days apart. Beside it, the committed
model's (or ``--model``'s) error on the same ranks within their plan, per
collection: a model trained on other days cannot be expected to predict a
day's structure much better than that day moves away from the others.
Measured = real FBGEMM CPU kernel times as the collections stored them;
predicted = the neural model. Writes ``bench/results/plan-group-drift-<name>.{md,csv}``.

    .venv/bin/python bench/plan_group_drift.py data/profiles/cpu-2c/compute-plan-groups.parquet \\
      data/profiles/cpu-2c/compute-plan-groups-round2.parquet ... --name cpu-train
"""
from __future__ import annotations

import argparse
import itertools
import shlex
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from shardplan.cost.estimator import load_estimator
from shardplan.cost.train import load_sets
from shardplan.errors import InputError, exit_status
from provenance import write_report  # a sibling: bench/ is on sys.path when run


def collections(paths: list[Path], searcher: str) -> pd.DataFrame:
    """One row per timed rank of ``searcher``'s plans: its collection (file and round), task, rank,
    shard set (as stored), date and log of its fwd+bwd ms less its plan's mean."""
    frames = []
    for path in paths:
        df = pd.read_parquet(path)
        df = df[df["searcher"] == searcher]
        for rnd, g in df.groupby("round"):
            lm = np.log(g["fwd_ms"] + g["bwd_ms"])
            frames.append(pd.DataFrame({
                "collection": f"{path.stem} round {rnd}", "task": g["task"], "rank": g["rank"],
                "shards": g["shards"], "date": g["date"],
                "z": lm - lm.groupby(g["task"]).transform("mean")}))
    return pd.concat(frames, ignore_index=True)


def pair_scatter(long: pd.DataFrame) -> pd.DataFrame:
    """Per pair of collections: ranks timed in both (same shard set), and one collection's scatter of a
    rank's within-plan log time (sd of the difference / sqrt 2; every rank of a plan in both)."""
    long = long.assign(key=long["task"] + "#" + long["rank"].astype(str))
    wide = long.pivot_table(index="key", columns="collection", values="z")
    sets = long.pivot_table(index="key", columns="collection", values="shards", aggfunc="first")
    days = long.groupby("collection")["date"].agg(["min", "max"])
    rows = []
    for a, b in itertools.combinations(wide.columns, 2):
        both = wide[[a, b]].dropna().index
        same = both[(sets.loc[both, a] == sets.loc[both, b]).to_numpy()]
        if len(same) < 2:
            continue
        diff = wide.loc[same, a] - wide.loc[same, b]
        rows.append({"a": a, "b": b, "a dates": f"{days.loc[a, 'min'][:16]}..{days.loc[a, 'max'][11:16]}",
                     "b dates": f"{days.loc[b, 'min'][:16]}..{days.loc[b, 'max'][11:16]}",
                     "same day": days.loc[a, "min"][:10] == days.loc[b, "min"][:10], "ranks": len(same),
                     "scatter per collection": float(diff.std() / np.sqrt(2))})
    return pd.DataFrame(rows)


def model_error(paths: list[Path], searcher: str, model: Path | None, profile: str) -> pd.DataFrame:
    """Per collection: the model's log error on ``searcher``'s ranks less its plan's mean (sd), and less
    its plan's straight-line trend in the log of the measured time (what the training recipe's
    ``group_tilt`` leaves out of a group's labels; ``NeuralCostModel.fit``)."""
    est = load_estimator(profile, model)
    rows = []
    for path in paths:
        sets, fwd, bwd, df = load_sets(path)
        keep = np.flatnonzero((df["searcher"] == searcher).to_numpy())
        pred = np.array([f + b for f, b in est.rank_compute([sets[i] for i in keep])])
        d = df.iloc[keep].assign(e=np.log((fwd[keep] + bwd[keep]) / pred), lm=np.log(fwd[keep] + bwd[keep]))
        for rnd, g in d.groupby("round"):
            centred = g[["e", "lm"]] - g.groupby("task")[["e", "lm"]].transform("mean")
            slope = ((centred["e"] * centred["lm"]).groupby(g["task"]).transform("sum")
                     / (centred["lm"].pow(2).groupby(g["task"]).transform("sum") + 1e-12))
            rows.append({"collection": f"{path.stem} round {rnd}", "ranks": len(g),
                         "model error within plan (sd)": float(centred["e"].std()),
                         "less the plan's trend in size (sd)": float((centred["e"] - slope * centred["lm"]).std())})
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("groups", type=Path, nargs="+", help="plan-group parquet files (shardplan collect ranks --visits)")
    ap.add_argument("--searcher", default="torchrec", help="whose plans (the same in every collection)")
    ap.add_argument("--model", type=Path, help="compute-model file (default: the profile's committed one)")
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args()
    pairs = pair_scatter(collections(args.groups, args.searcher))
    if pairs.empty:
        raise InputError("--searcher", f"no rank of {args.searcher!r} is timed in two collections with the same shards",
                         "give collections that timed the same plans")
    errors = model_error(args.groups, args.searcher, args.model, args.profile)
    summary = pairs.groupby("same day")["scatter per collection"].agg(["count", "median", "min", "max"])
    md = [f"# How a plan's structure moves between timings: `{args.searcher}` ranks ({args.name})", "",
          f"Command: `.venv/bin/python bench/plan_group_drift.py {shlex.join(sys.argv[1:])}`", "",
          "Measured: real FBGEMM CPU kernel times as each collection stored them (one divisor per task, so "
          "only ratios within a plan are labels). Per pair of collections, over the ranks both timed with "
          "the same shards: a rank's log time less its plan's mean, differenced between the two; the "
          "scatter per collection is that difference's sd / sqrt 2.", "",
          pairs.to_markdown(index=False, floatfmt=".4f"), "",
          "Same day or not:", "", summary.to_markdown(floatfmt=".4f"), "",
          f"The model's error within a plan on the same ranks (log measured / predicted less the plan's "
          f"mean; predicted by `{args.model or 'the committed model'}`):", "",
          errors.to_markdown(index=False, floatfmt=".4f"), ""]
    write_report(args.out, f"plan-group-drift-{args.name}", md, pairs)


if __name__ == "__main__":
    sys.exit(exit_status(main))
