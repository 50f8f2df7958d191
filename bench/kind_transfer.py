"""A profile labelled by ``shardplan collect paired``: its own model against its base's, as is and scaled.

A paired profile's labels are its base profile's labels times the ratio of
the two kinds (optimizer, weight type) timed in turns on each set
(:mod:`shardplan.cost.collect_paired`). Is a model of its own worth having,
or would the base's model times one factor do? On the rows its data holds
out (``split.is_holdout``: random sets by seed and sample, plan ranks by
task) and on its larger sets (``compute-large.parquet``, never trained on),
as ``shardplan train`` labels them, this script scores:

- the paired profile's committed model (and any `--models` of it, candidates);
- the base profile's model as it is (the other kind priced as the base's);
- the base's model times the median ratio of the training rows, forward and
  backward apart (one factor per head).

Random sets are priced at the random collector's level, plan ranks at plan
ranks' (as the reports do).

A paired label carries the noise of its ratio on top of its base label's.
``--repeats`` names files of the same held-out rows paired again with more
visits (``shardplan collect paired --held-out --visits 6 --out ...``): the
models are also scored against those labels and against the visit-weighted
pool of both ratios (the training label's divisor kept), and a second table
gives how far the two pairings of a row differ, so the noise of the labels a
model is scored on is known. A third table reads, over every pairing of a
row at once, how the ratio moves with the host's level (the reference timed
before it), the row held fixed (:func:`level_slope`), and what that slope
says a quiet host's ratio is against the labels'. Measured: the labels, real FBGEMM CPU kernel
times (the base label times the ratio timed here); predicted: the named
neural models. Prints a table and writes
``bench/results/kind-transfer-<profile>[-NAME].{md,csv}``.

    .venv/bin/python bench/kind_transfer.py --profile cpu-2c-nested-rowwise-adagrad --name s62
    .venv/bin/python bench/kind_transfer.py --profile cpu-2c-nested-rowwise-adagrad --name s63 \
        --repeats data/profiles/cpu-2c-nested-rowwise-adagrad/repeatability/*.parquet
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from shardplan.cost.collect_paired import LABEL_RECIPE
from shardplan.cost.model import NeuralCostModel
from shardplan.cost.profiles import get_profile, load1, reference_ms
from shardplan.cost.split import holdout_mask
from shardplan.cost.train import load_sets, reference_nominal
from shardplan.errors import InputError, exit_status
from heldout_compare import score_cells, shown  # siblings: bench/ is on sys.path when run
from provenance import provenance, write_report

# (split, file, source kept, priced at the random sets' level, every row held out: never trained on)
SPLITS = (("held-out random sets", "compute.parquet", None, True, False),
          ("held-out plan ranks", "compute-ranks.parquet", "plan-rank", False, False),
          ("larger sets", "compute-large.parquet", None, True, True))


def is_paired(frame: pd.DataFrame) -> bool:
    """Whether every row of a cost-data frame was labelled by ``shardplan collect paired``."""
    return "label_recipe" in frame and frame["label_recipe"].eq(LABEL_RECIPE).all()


def repaired_labels(df: pd.DataFrame, rows: np.ndarray, fwd: np.ndarray, bwd: np.ndarray, repeat: pd.DataFrame
                    ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Of ``df``'s rows ``rows`` (positions), those ``repeat`` paired again: per label set (as trained, re-paired,
    pooled) the positions and their fwd/bwd labels. Each is the training label times the new ratio over the
    trained one, so the base label's divisor is the one training used."""
    again = repeat.drop_duplicates("src_row", keep="last").set_index("src_row")
    src = df["src_row"].to_numpy()
    rows = rows[np.isin(src[rows], again.index.to_numpy())]
    r = again.loc[src[rows]]
    v0, v1 = df["paired_visits"].to_numpy()[rows], r["paired_visits"].to_numpy()
    out = {f"as trained ({int(np.median(v0))} visits)": (rows, fwd[rows], bwd[rows])}
    scales = {}
    for h in ("fwd", "bwd"):
        r0, r1 = df[f"ratio_{h}"].to_numpy()[rows], r[f"ratio_{h}"].to_numpy()
        scales[h] = (r1 / r0, np.exp((v0 * np.log(r0) + v1 * np.log(r1)) / (v0 + v1)) / r0)
    for i, name in enumerate((f"re-paired ({int(np.median(v1))} visits)",
                              f"pooled ({int(np.median(v0 + v1))} visits)")):
        out[name] = (rows, fwd[rows] * scales["fwd"][i], bwd[rows] * scales["bwd"][i])
    return out


def host_level(frame: pd.DataFrame) -> float:
    """How slow the host ran while a file's rows were paired: the median of the base kind's raw fwd+bwd over
    its label (1.0: as when the base labels were timed)."""
    return float(np.median((frame["raw_base_fwd_ms"] + frame["raw_base_bwd_ms"])
                           / (frame["base_fwd_ms"] + frame["base_bwd_ms"])))


def reference_slope(frame: pd.DataFrame) -> float:
    """Within one pairing, the slope of the log backward ratio on the log reference time taken before each row:
    how the ratio moves with the host's state, read off a timing the row's own noise does not enter."""
    return float(np.polyfit(np.log(frame["paired_ref_ms"]), np.log(frame["ratio_bwd"]), 1)[0])


def level_slope(frames: list[pd.DataFrame], quiet_ms: float) -> dict[str, str]:
    """How each head's ratio moves with the host's level, the row held fixed: every row paired more than once in
    ``frames`` (pairings of the same rows, the first the one training used) enters with its log ratio and its log
    reference time, each less its row's mean over its pairings, and the slope is the least-squares one through
    those (with its standard error). Carried from the first pairing's median reference to ``quiet_ms`` (a quiet
    host's reference), it says how far a quiet host's ratio sits from the labels'. A row's composition, which
    sets most of its ratio, cancels; what is left is the host's state and the timing noise."""
    long = pd.concat([f[["src_row", "paired_ref_ms", "ratio_fwd", "ratio_bwd"]].drop_duplicates("src_row", keep="last")
                      for f in frames], ignore_index=True)
    long = long[long.groupby("src_row")["src_row"].transform("size") > 1]
    logs = np.log(long.drop(columns="src_row"))
    centred = logs - logs.groupby(long["src_row"]).transform("mean")  # each row less its own mean
    x = centred["paired_ref_ms"].to_numpy()
    rows = long["src_row"].nunique()
    dof = len(long) - rows - 1  # one mean a row, and the slope
    out = {"rows paired twice or more": str(rows), "pairings": str(len(long))}
    gap = float(np.log(quiet_ms) - np.log(frames[0]["paired_ref_ms"]).median())
    for h in ("fwd", "bwd"):
        y = centred[f"ratio_{h}"].to_numpy()
        slope = float(x @ y / (x @ x))
        se = float(np.sqrt(((y - slope * x) ** 2).sum() / dof / (x @ x)))
        out[f"{h} slope"] = f"{slope:+.3f} ± {se:.3f}"
        out[f"{h} quiet / labels"] = f"{np.exp(slope * gap):.3f}"
    return out


def repeatability_row(split: str, labels: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
                      frames: tuple[pd.DataFrame, pd.DataFrame]) -> dict:
    """How far a row's two pairings differ: per head and fwd+bwd, the median |difference| over their mean and the
    median second over first, the share of fwd+bwd labels within 10% and 15% of each other; and per pairing, over
    every row of its file (``frames``), the host's level (:func:`host_level`), the median reference and
    :func:`reference_slope`."""
    (_, f0, b0), (_, f1, b1) = list(labels.values())[:2]
    pairs = {"fwd": (f0, f1), "bwd": (b0, b1), "fwd+bwd": (f0 + b0, f1 + b1)}
    diff = {h: np.abs(a - b) / ((a + b) / 2) for h, (a, b) in pairs.items()}
    names = list(labels)
    return {"split": split, "rows": len(f0), "pairings": f"{names[0]} vs {names[1]}",
            "host level, first / second": " / ".join(f"{host_level(f):.2f}x" for f in frames),
            "reference ms, first / second": " / ".join(f"{f['paired_ref_ms'].median():.2f}" for f in frames),
            "bwd ratio on reference, slope": " / ".join(f"{reference_slope(f):+.2f}" for f in frames),
            **{f"{h} median diff": f"{100 * np.median(d):.1f}%" for h, d in diff.items()},
            **{f"{h} second / first": f"{np.median(b / a):.3f}" for h, (a, b) in pairs.items()},
            "fwd+bwd within 10%": f"{100 * (diff['fwd+bwd'] <= 0.10).mean():.0f}%",
            "fwd+bwd within 15%": f"{100 * (diff['fwd+bwd'] <= 0.15).mean():.0f}%"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True, help="a profile labelled by shardplan collect paired")
    ap.add_argument("--repeats", nargs="*", type=Path, default=[],
                    help="the same held-out rows paired again (collect paired --held-out): scored against too")
    ap.add_argument("--models", nargs="*", type=Path, default=[],
                    help="the profile's other model files (candidates), scored beside its committed one")
    ap.add_argument("--name", help="results file stem suffix")
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args()
    load_before = load1()
    profile = get_profile(args.profile)
    data = pd.read_parquet(profile.dir / "compute.parquet")
    if not is_paired(data) or "base_profile" not in data:
        raise InputError("--profile", f"{profile.name}'s compute.parquet was not labelled by shardplan collect paired",
                         "name a paired profile")
    repeats: dict[str, list[tuple[str, pd.DataFrame]]] = {file: [] for _, file, *_ in SPLITS}
    for path in args.repeats:
        if not path.is_file():
            raise InputError("--repeats", f"no file {path}", "name parquet files of collect paired --held-out")
        rep = pd.read_parquet(path)
        if not is_paired(rep) or "src_row" not in rep:
            raise InputError("--repeats", f"{path} was not written by shardplan collect paired", "name its files")
        file = "compute-ranks.parquet" if (rep["source"] == "plan-rank").all() else "compute.parquet"
        repeats[file].append((path.stem, rep))
    base = get_profile(str(data["base_profile"].iloc[0]))
    for path in args.models:
        if not path.is_file():
            raise InputError("--models", f"no model file {path}", f"name compute-model.json files of {profile.name}")
    own = {f"{profile.name} (own model)": NeuralCostModel.load(profile.dir / "compute-model.json", profile.name),
           **{shown(p): NeuralCostModel.load(p, profile.name) for p in args.models}}
    as_base_model = NeuralCostModel.load(base.dir / "compute-model.json", base.name)
    nominal = reference_nominal(data)
    quiet_ms = reference_ms(base)
    rows, agreement, levels = [], [], []
    factors: dict[str, dict[str, float]] = {}
    for split, file, source, random_level, all_held in SPLITS:
        path = profile.dir / file
        if not path.exists():
            continue
        sets, fwd, bwd, df = load_sets(path, nominal, source=source, window_s=profile.slowdown_window_s)
        hold = np.ones(len(df), bool) if all_held else holdout_mask(df)
        # the factor is the training rows' median; the larger sets, never trained on, take the random sets'
        # (SPLITS lists them first)
        factor = factors["compute.parquet"] if all_held else {h: float(df[~hold][f"ratio_{h}"].median())
                                                             for h in ("fwd", "bwd")}
        factors[file] = factor
        labels = {"as trained": (np.flatnonzero(hold), fwd[hold], bwd[hold])}
        for tag, rep in repeats[file]:
            again = repaired_labels(df, np.flatnonzero(hold), fwd, bwd, rep)
            agreement.append(repeatability_row(f"{split} ({tag})", again, (df, rep)))
            labels.update({f"{name}, {tag}": v for name, v in list(again.items())[1:]})
        if repeats[file]:
            levels.append({"split": split, **level_slope([df, *(rep for _, rep in repeats[file])], quiet_ms)})
        for label_name, (at, lf, lb) in labels.items():
            held = [sets[i] for i in at]
            as_base = as_base_model.predict(held, random_level=random_level)
            priced = {**{name: m.predict(held, random_level=random_level) for name, m in own.items()},
                      f"{base.name} as it is": as_base,
                      f"{base.name} x {factor['fwd']:.2f} fwd, x {factor['bwd']:.2f} bwd":
                          (as_base[0] * factor["fwd"], as_base[1] * factor["bwd"])}
            for name, (pf, pb) in priced.items():
                rows.append({"split": split, "labels": label_name, "rows": len(at), "model": name,
                             **score_cells(pf, pb, lf, lb)})
    table = pd.DataFrame(rows)
    md = [f"# A paired profile's own model against its base's, profile `{profile.name}`", "",
          *provenance(load_before, f". Labels: `{base.name}`'s real FBGEMM CPU kernel labels times the ratio of "
                      f"the two kinds timed in turns, divided as `shardplan train` divides them (quiet reference "
                      f"{nominal:.4f} ms); predicted: each neural model named."), "",
          table.to_markdown(index=False), ""]
    if agreement:
        md += ["Labels of the same rows paired twice (the difference over their mean):", "",
               pd.DataFrame(agreement).to_markdown(index=False), "",
               f"How the log ratio moves with the log reference, each row against its own mean over its pairings "
               f"(the first the training labels'), and that slope carried from the first pairing's median reference "
               f"to a quiet host's ({quiet_ms:.4f} ms, `{base.name}`'s reference.json):", "",
               pd.DataFrame(levels).to_markdown(index=False), ""]
    write_report(args.out, f"kind-transfer-{profile.name}" + (f"-{args.name}" if args.name else ""), md, table)


if __name__ == "__main__":
    sys.exit(exit_status(main))
