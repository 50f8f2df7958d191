"""Compute models against each way of dividing a profile's labels, on its held-out plan ranks.

A candidate trained on other labels (``shardplan train --slowdown-window-s``)
scores on its own labels in its report, so its figures and the committed
model's are on different truths. This script scores every model given on
the same held-out plan ranks (the tasks training holds out) under each label
recipe: each timing over its own references, and over the median slowdown
within each ``--window-s`` (:mod:`shardplan.cost.labels`). Predicted: each
named model, at plan ranks' level; labels: real FBGEMM CPU kernel times of
``compute-ranks.parquet``. Prints a table and writes
``bench/results/label-recipes-<profile>[-NAME].{md,csv}``.

    .venv/bin/python bench/label_recipes.py --profile cpu-2c-nested \\
        --models data/profiles/cpu-2c-nested/candidates/window-30/compute-model.json --window-s 30
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from shardplan.argtypes import at_least
from shardplan.cost.estimator import load_estimator
from shardplan.cost.profiles import get_profile, load1, reference_ms
from shardplan.cost.split import holdout_mask
from shardplan.cost.train import load_sets
from shardplan.errors import InputError, exit_status
from provenance import provenance, write_report  # siblings: bench/ is on sys.path when run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True)
    ap.add_argument("--models", nargs="*", default=[], help="model files besides the profile's committed one")
    ap.add_argument("--window-s", type=at_least(1, float), nargs="*", default=[])
    ap.add_argument("--name", help="results file stem suffix")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    load_before = load1()
    profile = get_profile(args.profile)
    quiet = reference_ms(profile)
    path = profile.dir / "compute-ranks.parquet"
    if not quiet or not path.exists():
        raise InputError("--profile", f"profile {args.profile!r} has no trained reference or stored plan ranks",
                         "collect plan ranks and train it first")
    truths = {}
    for window in [None, *args.window_s]:
        sets, fwd, bwd, df = load_sets(path, quiet, source="plan-rank", window_s=window)
        held = holdout_mask(df)
        truths["own references" if window is None else f"median within {window / 2:g} s"] = (
            [s for s, h in zip(sets, held) if h], (fwd + bwd)[held])
    held_sets = next(iter(truths.values()))[0]
    rows = []
    for model in [None, *args.models]:
        est = load_estimator(args.profile, model)
        pred = np.array([sum(est.rank_compute([s])[0]) for s in held_sets])
        for recipe, (_, y) in truths.items():
            err = pred / y - 1
            a = np.abs(err)
            rows.append({"model": model or f"committed {args.profile}", "labels divided by": recipe, "ranks": len(y),
                         "MAPE": f"{100 * a.mean():.1f}%", "within 15%": f"{100 * (a <= 0.15).mean():.1f}%",
                         "median signed": f"{100 * np.median(err):+.1f}%"})
    table = pd.DataFrame(rows)
    md = [f"# Compute models against each label recipe, profile `{args.profile}`", "",
          *provenance(load_before, f". The {len(held_sets)} plan ranks of the tasks training holds out; predicted "
                      "by each model, labels real FBGEMM CPU kernel times divided by each recipe."), "",
          table.to_markdown(index=False), ""]
    write_report(Path(args.out), f"label-recipes-{args.profile}" + (f"-{args.name}" if args.name else ""), md, table)


if __name__ == "__main__":
    sys.exit(exit_status(main))
