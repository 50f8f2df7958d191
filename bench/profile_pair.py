"""The same random shard sets timed on two CPU profiles' hosts, and each profile's model on the other's.

Both profiles' ``compute.parquet`` were drawn by the same collector with the same seed, so sample ``i``
is the same shard set on both hosts. This script pairs them: the ratio of the second host's fwd+bwd
time to the first's, by the set's bytes held and by its time on the first host (one number would do if
the hosts differed by a clock rate; they do not), and then every trained model of either profile
priced against both hosts' held-out labels: how far a model taken on one CPU is from another CPU's
kernels, beside its own. Measured = real FBGEMM CPU kernel times as each collector stored them
(divided by each sample's own reference slowdown, as training divides them); predicted = the named
profile's committed neural model, at the random sets' own level as its training report scores them.
Writes ``bench/results/profile-pair-<a>-<b>.{md,csv}``.

    .venv/bin/python bench/profile_pair.py cpu-2c cpu-2c-xeon
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from shardplan.cost.model import NeuralCostModel
from shardplan.cost.profiles import get_profile, load1
from shardplan.cost.split import holdout_mask
from shardplan.cost.train import load_sets, reference_nominal
from shardplan.errors import exit_status
from provenance import provenance, write_report  # a sibling: bench/ is on sys.path when run


def labelled(profile: str) -> tuple[pd.DataFrame, list]:
    """A profile's random sets: seed, sample, fwd+bwd and fwd ms divided by the sample's slowdown, held out or
    not, bytes held; and the shard sets themselves."""
    path = get_profile(profile).dir / "compute.parquet"
    nominal = reference_nominal(pd.read_parquet(path, columns=["ref_before_ms", "ref_after_ms"]))
    sets, fwd, bwd, df = load_sets(path, nominal)
    return pd.DataFrame({"pos": np.arange(len(df)), "seed": df["seed"], "sample": df["sample"],
                         "ms": fwd + bwd, "fwd": fwd,
                         "holdout": holdout_mask(df), "shards": df["shards"],
                         "mib": [sum(s.rows * s.cols * 4 for s in x) / 2**20 for x in sets]}), sets


def paired(da: pd.DataFrame, db: pd.DataFrame) -> pd.DataFrame:
    """The sets both hosts timed (same seed and sample and the very same shards), side by side
    (suffixes ``_a``, ``_b``; ``pos_a`` is the set's row in the first file), with ``ratio`` = b's time
    over a's."""
    pair = da.merge(db, on=["seed", "sample"], suffixes=("_a", "_b"))
    pair = pair[(pair["shards_a"] == pair["shards_b"]).to_numpy()].reset_index(drop=True)
    return pair.assign(ratio=pair["ms_b"] / pair["ms_a"])


def accuracy(pred: np.ndarray, meas: np.ndarray) -> dict[str, float]:
    return {"MAPE": float(np.mean(np.abs(pred / meas - 1.0))), "Spearman": float(spearmanr(pred, meas)[0]),
            "median pred/meas": float(np.median(pred / meas))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", help="first CPU profile")
    ap.add_argument("b", help="second CPU profile")
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args()
    load_before = load1()
    (da, sets_a), (db, _) = labelled(args.a), labelled(args.b)
    pair = paired(da, db)
    q = lambda s: pd.Series({"sets": len(s), "p10": s.quantile(0.1), "median": s.median(),  # noqa: E731
                             "p90": s.quantile(0.9)})
    mib_bins = pd.cut(pair["mib_a"], [0, 4, 32, 128, 480, 4096])
    by_bytes = pair.groupby(mib_bins, observed=True)["ratio"].apply(q).unstack()
    by_time = pair.groupby(pd.qcut(pair["ms_a"], 5), observed=True)["ratio"].apply(q).unstack()
    by_bytes.index, by_time.index = by_bytes.index.astype(str), by_time.index.astype(str)

    # Each profile's model on each host's held-out sets (held out of both profiles' training alike:
    # the split hashes seed and sample, which pair the same sets).
    held = pair[pair["holdout_a"] & pair["holdout_b"]]
    specs = [sets_a[i] for i in held["pos_a"]]
    rows = []
    for model_profile in (args.a, args.b):
        model = NeuralCostModel.load(get_profile(model_profile).dir / "compute-model.json", model_profile)
        fwd, bwd = model.predict(specs, random_level=True)  # at the random sets' own level, as its report
        pred = fwd + bwd
        for host, col in ((args.a, "ms_a"), (args.b, "ms_b")):
            rows.append({"model (profile)": model_profile, "labels (host of profile)": host,
                         "own host": model_profile == host, "sets": len(held),
                         **accuracy(pred, held[col].to_numpy())})
    acc = pd.DataFrame(rows)
    md = [f"# The same shard sets on `{args.a}` and `{args.b}`", "", *provenance(load_before), "",
          f"{len(pair)} random sets timed on both hosts (same collector seed and sample); ratio = `{args.b}`'s "
          f"fwd+bwd ms over `{args.a}`'s, each divided by its sample's reference slowdown. "
          f"Median **{pair['ratio'].median():.3f}**, 10th-90th percentile {pair['ratio'].quantile(0.1):.3f}-"
          f"{pair['ratio'].quantile(0.9):.3f}; forward alone median "
          f"{(pair['fwd_b'] / pair['fwd_a']).median():.3f}, backward alone "
          f"{((pair['ms_b'] - pair['fwd_b']) / (pair['ms_a'] - pair['fwd_a'])).median():.3f}.", "",
          f"## By bytes held (MiB, `{args.a}`'s sets)", "", by_bytes.to_markdown(floatfmt=".3f"), "",
          f"## By time on `{args.a}` (fifths)", "", by_time.to_markdown(floatfmt=".3f"), "",
          "## Each profile's committed model against each host's labels", "",
          f"The {len(held)} sets held out of both profiles' training. A model on another CPU's labels is what "
          "a user gets who plans with a profile of the wrong hardware.", "",
          acc.to_markdown(index=False, floatfmt=".3f"), ""]
    write_report(args.out, f"profile-pair-{args.a}-{args.b}", md,
                 pair[["seed", "sample", "mib_a", "ms_a", "ms_b", "ratio", "holdout_a"]])


if __name__ == "__main__":
    sys.exit(exit_status(main))
