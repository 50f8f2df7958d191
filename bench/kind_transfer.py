"""A profile labelled by ``shardplan collect paired``: its own model against its base's, as is and scaled.

A paired profile's labels are its base profile's labels times the ratio of
the two kinds (optimizer, weight type) timed in turns on each set
(:mod:`shardplan.cost.collect_paired`). Is a model of its own worth having,
or would the base's model times one factor do? On the rows its data holds
out (``train.is_holdout``: random sets by seed and sample, plan ranks by
task), as ``shardplan train`` labels them, this script scores:

- the paired profile's committed model;
- the base profile's model as it is (the other kind priced as the base's);
- the base's model times the median ratio of the training rows, forward and
  backward apart (one factor per head).

Random sets are priced at the random collector's level, plan ranks at plan
ranks' (as the reports do). Measured: the labels, real FBGEMM CPU kernel
times (the base label times the ratio timed here); predicted: the named
neural models. Prints a table and writes
``bench/results/kind-transfer-<profile>[-NAME].{md,csv}``.

    .venv/bin/python bench/kind_transfer.py --profile cpu-2c-nested-rowwise-adagrad --name s62
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from shardplan.cost.collect_paired import LABEL_RECIPE
from shardplan.cost.model import NeuralCostModel
from shardplan.cost.profiles import get_profile, load1
from shardplan.cost.train import holdout_mask, load_sets, reference_nominal
from shardplan.errors import InputError, exit_status
from heldout_compare import score_cells  # siblings: bench/ is on sys.path when run
from provenance import provenance, write_report

SPLITS = (("held-out random sets", "compute.parquet", None, True),
          ("held-out plan ranks", "compute-ranks.parquet", "plan-rank", False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True, help="a profile labelled by shardplan collect paired")
    ap.add_argument("--name", help="results file stem suffix")
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args()
    load_before = load1()
    profile = get_profile(args.profile)
    data = pd.read_parquet(profile.dir / "compute.parquet")
    if data.get("label_recipe", pd.Series(dtype=str)).ne(LABEL_RECIPE).any() or "base_profile" not in data:
        raise InputError("--profile", f"{profile.name}'s compute.parquet was not labelled by shardplan collect paired",
                         "name a paired profile")
    base = get_profile(str(data["base_profile"].iloc[0]))
    models = {"own": NeuralCostModel.load(profile.dir / "compute-model.json", profile.name),
              "base": NeuralCostModel.load(base.dir / "compute-model.json", base.name)}
    nominal = reference_nominal(data)
    rows = []
    for split, file, source, random_level in SPLITS:
        path = profile.dir / file
        if not path.exists():
            continue
        sets, fwd, bwd, df = load_sets(path, nominal, source=source, window_s=profile.slowdown_window_s)
        hold = holdout_mask(df)
        factor = {h: float(df.loc[~hold, f"ratio_{h}"].median()) for h in ("fwd", "bwd")}
        held = [sets[i] for i in np.flatnonzero(hold)]
        own = models["own"].predict(held, random_level=random_level)
        as_base = models["base"].predict(held, random_level=random_level)
        for name, (pf, pb) in ((f"{profile.name} (own model)", own), (f"{base.name} as it is", as_base),
                               (f"{base.name} x {factor['fwd']:.2f} fwd, x {factor['bwd']:.2f} bwd",
                                (as_base[0] * factor["fwd"], as_base[1] * factor["bwd"]))):
            rows.append({"split": split, "rows": int(hold.sum()), "model": name,
                         **score_cells(pf, pb, fwd[hold], bwd[hold])})
    table = pd.DataFrame(rows)
    md = [f"# A paired profile's own model against its base's, profile `{profile.name}`", "",
          *provenance(load_before, f". Labels: `{base.name}`'s real FBGEMM CPU kernel labels times the ratio of "
                      f"the two kinds timed in turns, divided as `shardplan train` divides them (quiet reference "
                      f"{nominal:.4f} ms); predicted: each neural model named."), "",
          table.to_markdown(index=False), ""]
    write_report(args.out, f"kind-transfer-{profile.name}" + (f"-{args.name}" if args.name else ""), md, table)


if __name__ == "__main__":
    sys.exit(exit_status(main))
