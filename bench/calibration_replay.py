"""Neighbour calibration replayed offline on re-timed stored ranks, under each way of dividing labels.

``shardplan collect retime`` times a block of a profile's stored plan ranks
again (``data/profiles/<profile>/repeatability/``). This script replays
:mod:`shardplan.cost.calibration` on such a re-timing without timing anything:
each re-timed rank is divided by the factor of its ``k`` nearest re-timed
ranks of other tasks (each one's re-timed ms over its label, geometric mean),
and the result is compared with its own label. It does so once per label
recipe: each label over its own references, and over the median slowdown
within each ``--window-s`` (:mod:`shardplan.cost.labels`). Labels are the
calibration pool's own (:func:`shardplan.cost.fitness.labelled_ranks`). The
error it reports is the instrument's and the labels' together, with no model
involved; the real instrument interleaves a rank with its neighbours and
takes two passes, so it sits below these figures.

``--k`` given several values replays each neighbourhood size in turn;
``--pooled`` adds a recipe that asks every other task's re-timed rank at
once instead of the nearest few: a ridge fit of log(re-timed over label) on
the neighbour features (``calibration.POINT_NAMES``), whether the rank holds two
batch sizes and its log shard count, evaluated at the rank (session 65: no
better than 6 neighbours on short ranks).

    .venv/bin/python bench/calibration_replay.py --profile cpu-2c-nested \\
        --block data/profiles/cpu-2c-nested/repeatability/ranks-sub.parquet \\
        --retimes data/profiles/cpu-2c-nested/repeatability/ranks-sub-retime{,2}.parquet --window-s 15 30 60
    .venv/bin/python bench/calibration_replay.py --profile cpu-2c-nested \\
        --block data/profiles/cpu-2c-nested/repeatability/ranks-sub.parquet \\
        --retimes data/profiles/cpu-2c-nested/repeatability/ranks-sub-retime{,2}.parquet --k 3 6 10 16 24 \\
        --pooled --name recipes-s65
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from shardplan.argtypes import at_least
from shardplan.cost.calibration import NEIGHBOURS, LabelledPool, nearest, rank_point
from shardplan.cost.fitness import labelled_ranks
from shardplan.cost.profiles import get_profile, load1
from shardplan.cost.specs import specs_from_json
from shardplan.errors import InputError, exit_status
from provenance import provenance, write_report  # siblings: bench/ is on sys.path when run

RANK_KEY = ["task", "searcher", "rank", "round", "shards"]  # what pairs a block's row with the whole file's


def replay(labels: np.ndarray, raw: np.ndarray, specs: list, tasks: np.ndarray, k: int) -> np.ndarray:
    """Each rank's calibrated ms over its label, minus 1: its ``raw`` ms over its ``k`` nearest ranks'
    (by :func:`calibration.nearest`, other tasks only) geometric mean of raw over label."""
    feats = np.stack([rank_point(s, lab) for s, lab in zip(specs, labels)])
    pool = LabelledPool(tuple(range(len(labels))), tuple(tasks), feats, feats.std(axis=0) + 1e-9)
    err = np.empty(len(labels))
    for j in range(len(labels)):
        nb = list(nearest(pool, labels[j], specs[j], k, exclude_task=str(tasks[j])))
        factor = np.exp(np.mean(np.log(raw[nb] / labels[nb])))
        err[j] = raw[j] / factor / labels[j] - 1
    return err


POOLED_RIDGE = 1.0  # the pooled fit's ridge penalty (0.1-10 gave the same errors to 0.5 points)


def pooled_replay(labels: np.ndarray, raw: np.ndarray, specs: list, tasks: np.ndarray) -> np.ndarray:
    """Each rank's calibrated ms over its label, minus 1, its factor read off a ridge fit over every rank of the
    other tasks (log raw over label on the neighbour features, two batch sizes, log shard count)."""
    feats = np.stack([rank_point(s, lab) for s, lab in zip(specs, labels)])
    two_batches = [len({x.batch_size for x in s}) > 1 for s in specs]
    x = np.column_stack([np.ones(len(labels)), feats, two_batches, np.log([len(s) for s in specs])])
    y = np.log(raw / labels)
    penalty = POOLED_RIDGE * np.diag([0.0] + [1.0] * (x.shape[1] - 1))  # the level itself is not shrunk
    err = np.empty(len(labels))
    for j in range(len(labels)):
        other = tasks != tasks[j]
        a = x[other]
        w = np.linalg.solve(a.T @ a + penalty, a.T @ y[other])
        err[j] = raw[j] / np.exp(x[j] @ w) / labels[j] - 1
    return err


def length_bands(labels: np.ndarray, short_ms: float) -> list[tuple[str, np.ndarray]]:
    """All ranks, then those under and over ``short_ms`` by their label: on a disturbed host short ranks
    move the most between timings, so the instrument's floor is theirs (docs/cost-model.md)."""
    short = labels < short_ms
    return [("all", np.ones(len(labels), dtype=bool)), (f"under {short_ms:g} ms", short),
            (f"{short_ms:g} ms or more", ~short)]


def error_columns(err: np.ndarray) -> dict[str, object]:
    """How far calibrated ranks land from their labels (``err``: calibrated over label, minus 1)."""
    a = np.abs(err)
    if not len(a):
        return {"ranks": 0}
    return {"ranks": len(a), "mean abs error": f"{100 * a.mean():.1f}%", "median": f"{100 * np.median(a):.1f}%",
            "within 10%": f"{100 * (a <= 0.10).mean():.0f}%", "within 15%": f"{100 * (a <= 0.15).mean():.0f}%",
            "mean error": f"{100 * err.mean():+.1f}%"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True)
    ap.add_argument("--block", type=Path, required=True, help="the stored ranks re-timed (rows of compute-ranks)")
    ap.add_argument("--retimes", type=Path, nargs="+", required=True, help="shardplan collect retime outputs")
    ap.add_argument("--window-s", type=at_least(1, float), nargs="*", default=[],
                    help="label recipes besides each label's own references")
    ap.add_argument("--k", type=at_least(1), nargs="+", default=[NEIGHBOURS],
                    help="neighbours a rank is divided by; several values are replayed in turn")
    ap.add_argument("--pooled", action="store_true",
                    help="also divide each rank by a ridge fit over every other task's rank (pooled_replay)")
    ap.add_argument("--short-ms", type=at_least(0.0, float), default=10.0,
                    help="also report the ranks under and over this label apart (default %(default)s ms)")
    ap.add_argument("--name", help="results file stem suffix")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    load_before = load1()
    profile = get_profile(args.profile)
    block = pd.read_parquet(args.block).reset_index(drop=True)
    rows = np.flatnonzero((block["source"] == "plan-rank").to_numpy())
    specs = [specs_from_json(s) for s in block["shards"].iloc[rows]]
    tasks = block["task"].iloc[rows].astype(str).to_numpy()
    out = []
    for window in [None, *args.window_s]:
        # the calibration pool's own labels (stored ranks that passed the quiet gate), under this recipe
        labelled = labelled_ranks(replace(profile, slowdown_window_s=window))
        if labelled.empty:
            raise InputError("--profile", f"profile {args.profile!r} has no reference.json or stored plan ranks",
                             "collect plan ranks and train it first")
        labels = block.iloc[rows][RANK_KEY].merge(labelled[RANK_KEY + ["label"]].drop_duplicates(RANK_KEY),
                                                  on=RANK_KEY, how="left")["label"].to_numpy()
        if np.isnan(labels).all():
            raise InputError("--block", f"none of its ranks is among the labelled ranks of "
                             f"{profile.dir / 'compute-ranks.parquet'}", "give a block cut from that file")
        keep = ~np.isnan(labels)  # a rank whose label failed the quiet gate (fitness.labelled_ranks) is left out
        unlabelled = int((~keep).sum())
        labels, kept = labels[keep], rows[keep]
        kept_specs, kept_tasks = [s for s, k in zip(specs, keep) if k], tasks[keep]
        for path in args.retimes:
            r = pd.read_parquet(path).set_index("src_row")
            raw = (r.fwd_ms + r.bwd_ms).reindex(kept).to_numpy()
            recipe = "own references" if window is None else f"median within {window / 2:g} s"
            errs = {f"{k} nearest": replay(labels, raw, kept_specs, kept_tasks, k) for k in args.k}
            if args.pooled:
                errs["pooled fit"] = pooled_replay(labels, raw, kept_specs, kept_tasks)
            for factor_by, err in errs.items():
                for band, mask in length_bands(labels, args.short_ms):
                    out.append({"labels divided by": recipe, "re-timing": path.name, "factor of": factor_by,
                                "ranks of": band, **error_columns(err[mask])})
    table = pd.DataFrame(out)
    md = [f"# Neighbour calibration replayed on re-timed stored ranks, profile `{args.profile}`", "",
          *provenance(load_before, f". {len(rows) - unlabelled} stored ranks of `{args.block}` (and "
                      f"{unlabelled} whose label failed the quiet gate, left out), each re-timing's ms over the "
                      "factor of re-timed ranks of other tasks (`factor of`: its k nearest, or a fit over all), "
                      "against its label. Measured: real FBGEMM CPU kernel times (the re-timings), replayed "
                      "offline; no model involved."), "",
          table.to_markdown(index=False), ""]
    write_report(Path(args.out), f"calibration-replay-{args.profile}" + (f"-{args.name}" if args.name else ""),
                 md, table)


if __name__ == "__main__":
    sys.exit(exit_status(main))
