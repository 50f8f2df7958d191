"""How well compute models predict the ratios between the ranks of one task's plans (plan groups).

A plan-group file (``shardplan collect ranks --visits ...``) holds every rank
of a task's plans timed together under one divisor, so only the ratios within
a group are labels. Each model's predictions are scaled per group to the
measured level (``shardplan.cost.train.level_matched``, as ``shardplan
train`` scores its held-out groups) and the fwd+bwd MAPE that remains is
reported per file, split by training hold-out (``is_holdout``: by task) and by
collection round. Predicted = each model file; measured = the files' real
FBGEMM CPU timings. Writes ``bench/results/group-accuracy-<name>.{md,csv}``.

    .venv/bin/python bench/group_accuracy.py --models data/profiles/cpu-2c/compute-model.json NEW.json \\
      --groups data/profiles/cpu-2c/compute-plan-groups.parquet data/profiles/cpu-2c/compute-plan-groups-round2.parquet
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from shardplan.cost.estimator import load_estimator
from shardplan.cost.profiles import load1
from shardplan.cost.split import holdout_mask
from shardplan.cost.train import level_matched, load_sets, metrics
from shardplan.errors import exit_status
from shardplan.formats import write_text_atomic
from provenance import provenance  # a sibling: bench/ is on sys.path when run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", required=True, help="compute-model files")
    ap.add_argument("--groups", nargs="+", type=Path, required=True, help="plan-group parquet files")
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args()
    load_before = load1()
    models = {m: load_estimator(args.profile, m).compute for m in args.models}
    rows = []
    for path in args.groups:
        sets, fwd, bwd, df = load_sets(path)  # already divided, by one slowdown per group
        group = df["group"].astype("category").cat.codes.to_numpy()
        held = holdout_mask(df)
        predictions = {m: model.predict(sets) for m, model in models.items()}
        for rnd in sorted(df["round"].unique()):
            for split, mask in (("held out", held), ("trained on", ~held)):
                idx = np.flatnonzero(mask & (df["round"].to_numpy() == rnd))
                if not len(idx):
                    continue
                for m, (pf, pb) in predictions.items():
                    lf, lb = level_matched(pf[idx], pb[idx], fwd[idx], bwd[idx], group[idx])
                    rows.append({"file": path.name, "round": int(rnd), "split": split, "ranks": len(idx),
                                 "groups": len(np.unique(group[idx])), "model": m,
                                 "mape": metrics(lf, lb, fwd[idx], bwd[idx])["fwd+bwd"]["mape"]})
    df = pd.DataFrame(rows)
    table = df.pivot_table(index=["file", "round", "split", "ranks", "groups"], columns="model", values="mape",
                           sort=False).reset_index()
    args.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out / f"group-accuracy-{args.name}.csv", df.to_csv(index=False))
    md = [f"# Plan-group accuracy: {args.name}", "", *provenance(load_before), "",
          "Predicted: each model file (columns). Measured: the files' rank timings, real FBGEMM CPU kernels on "
          "the profile's machine (protocol, date and divisor in each file's rows and the profile README). "
          "fwd+bwd MAPE after matching each group's level: the error in the ratios between ranks timed "
          "together. `split`: whether `shardplan train` holds the task out (`is_holdout`); a model scored on "
          "rows it was trained on says little.", "",
          table.to_markdown(index=False, floatfmt=".4f")]
    write_text_atomic(args.out / f"group-accuracy-{args.name}.md", "\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    sys.exit(exit_status(main))
