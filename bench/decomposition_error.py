"""How far sets sit over their shards alone, measured and predicted: a model on the stored decompositions.

``shardplan collect decompositions`` times plan ranks whole and shard by
shard in the same repetitions; the ratio of the whole over the sum of its
shards alone is a label in which the host's level cancels. This script
predicts each set whole and each shard alone with ``--model`` (default: the
profile's committed model) and reports the predicted ratio against the
measured one (fwd+bwd; signed error: negative, the model says the shards slow
one another less than they do), overall, per split (the decompositions
training holds out, by source row, and the rest), by MB of rows touched a
batch and by shard count, beside the label's own spread (the median distance
of a repetition's ratio from the set's median). And, since each set is a
stored plan rank with a label of its own (taken at another hour): how far the
whole now sits from that label (divided by the reference slowdown of its
repetitions, as training divides labels), and how much of that move the
error in the predicted ratio accounts for (a least-squares line in log).
With ``--paired-with`` (another decompositions file of the same source rows,
e.g. a re-time) the sets both files hold are compared pair by pair: the ratio,
the sum of the shards alone and the reference, one file's over the other's.
Measured = real FBGEMM CPU
kernel times of the file; predicted = the named model. Writes
``bench/results/decomposition-error-<name>.md``.

    .venv/bin/python bench/decomposition_error.py --profile cpu-2c-xeon --name cpu-2c-xeon
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from shardplan.cost.estimator import load_estimator
from shardplan.cost.features import touched_bytes
from shardplan.cost.kernel import slowdown
from shardplan.cost.profiles import get_profile, load1, reference_ms
from shardplan.cost.train import (decomposition_holdout, load_decompositions, measured_ratios, predicted_ratios,
                                  repetition_ratios)
from shardplan.errors import InputError, exit_status
from error_map import TOUCHED_MB_EDGES, binned, mape, median_error  # siblings: bench/ is on sys.path when run
from provenance import provenance, write_report

SHARD_EDGES = (2, 4, 8, 16, np.inf)
HEAVY_MB = 16.0  # sets touching more than this a batch: where the host's state moves the ratio most
WINDOW_MIN = 5  # minutes per row of the by-the-clock table


def ratio_rows(df: pd.DataFrame, sets: list, predicted: np.ndarray) -> pd.DataFrame:
    """One row per decomposition: split, shard count, MB touched, the whole's raw ms, measured and predicted
    fwd+bwd ratio (whole over the sum alone; measured per repetition, then the median), signed log error and
    the label's spread (median |log repetition ratio - log median ratio|)."""
    rows = []
    held, measured_all = decomposition_holdout(df), measured_ratios(df)[:, 2]
    for (_, r), specs, pred, measured, out in zip(df.iterrows(), sets, predicted, measured_all, held):
        per_rep = repetition_ratios(r)
        rows.append({"file": "decompositions", "split": "held out" if out else "trained on",
                     "shards": len(specs), "touched_mb": touched_bytes(specs) / 2**20,
                     "whole_ms": r["whole_fwd_ms"] + r["whole_bwd_ms"], "measured_ratio": measured,
                     "predicted_ratio": float(pred), "log_error": float(np.log(pred / measured)),
                     "label_spread": float(np.median(np.abs(np.log(per_rep / measured))))})
    return pd.DataFrame(rows)


def by_the_clock(rows: pd.DataFrame, df: pd.DataFrame, quiet_ms: float) -> pd.DataFrame:
    """Per ``WINDOW_MIN`` minutes of collection: sets, the median reference slowdown, the median signed error of
    the predicted ratio (all sets; those touching over ``HEAVY_MB``), and the heavy sets' median measured ratio.
    The sets are taken in a seeded random order, so a move along the clock is the host's."""
    when = pd.to_datetime(df["date"]).dt.floor(f"{WINDOW_MIN}min").dt.strftime("%H:%M").to_numpy()
    heavy = rows["touched_mb"] > HEAVY_MB
    out = []
    for t in sorted(set(when)):
        w, h = when == t, (when == t) & heavy
        out.append({"from (UTC)": t, "sets": int(w.sum()),
                    "reference": float(np.median(np.concatenate(df.loc[w, "ref_ms"].map(np.asarray).tolist())))
                    / quiet_ms,
                    "error, all": median_error(rows.loc[w, "log_error"]),
                    f"error, over {HEAVY_MB:g} MB": median_error(rows.loc[h, "log_error"]) if h.any() else "",
                    f"measured ratio, over {HEAVY_MB:g} MB": float(rows.loc[h, "measured_ratio"].median())
                    if h.any() else np.nan})
    return pd.DataFrame(out)


def label_moves(df: pd.DataFrame, profile_dir: Path, quiet_ms: float) -> np.ndarray:
    """Each set's whole now over its stored label, both divided by the reference slowdown of their timing
    (now: the median reference of its repetitions; the label: its row's before/after references)."""
    moves = np.full(len(df), np.nan)
    for name, part in df.groupby("src"):
        src = pd.read_parquet(profile_dir / name).loc[part["src_row"]]
        label = (src["fwd_ms"] + src["bwd_ms"]).to_numpy() / slowdown(
            src["ref_before_ms"].to_numpy(), src["ref_after_ms"].to_numpy(), quiet_ms)
        part_slowdown = part["ref_ms"].map(np.median).to_numpy() / quiet_ms
        now = (part["whole_fwd_ms"] + part["whole_bwd_ms"]).to_numpy() / part_slowdown
        moves[df.index.get_indexer(part.index)] = now / label
    return moves


def paired(df: pd.DataFrame, other: pd.DataFrame, heavy: pd.Series) -> pd.DataFrame:
    """For the source rows both files hold: medians of this file's over ``other``'s fwd+bwd ratio
    (:func:`measured_ratios`; all sets, heavy and light ones: ``heavy`` per row of ``df``), sum of the
    shards alone and median reference."""
    a, b = df.assign(heavy=heavy.to_numpy()).set_index("src_row"), other.set_index("src_row")
    common = a.index.intersection(b.index)
    a, b = a.loc[common], b.loc[common]
    alone = lambda d: d["alone_fwd_ms"].map(np.sum) + d["alone_bwd_ms"].map(np.sum)  # noqa: E731
    move = pd.Series(measured_ratios(a)[:, 2] / measured_ratios(b)[:, 2], index=common)
    return pd.DataFrame([{
        "pairs": len(common), f"heavy (over {HEAVY_MB:g} MB)": int(a["heavy"].sum()),
        "ratio, all": move.median(), "ratio, heavy": move[a["heavy"]].median(),
        "ratio, light": move[~a["heavy"]].median(),
        "sum alone": (alone(a) / alone(b)).median(),
        "reference": (a["ref_ms"].map(np.median) / b["ref_ms"].map(np.median)).median(),
        "dates": f"{a['date'].min()[11:16]}-{a['date'].max()[11:16]} over "
                 f"{b['date'].min()[11:16]}-{b['date'].max()[11:16]} UTC"}])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--file", type=Path,
                    help="decompositions file (default: the profile's compute-decompositions.parquet)")
    ap.add_argument("--model", help="compute-model file (default: the profile's committed one)")
    ap.add_argument("--paired-with", type=Path, help="another decompositions file of the same source rows (a re-time)")
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args()
    profile = get_profile(args.profile)
    path = args.file or profile.dir / "compute-decompositions.parquet"
    if not path.is_file():
        raise InputError("--file", f"no decompositions at {path}", "collect them: shardplan collect decompositions")
    model = load_estimator(args.profile, args.model).compute
    load_before = load1()
    sets, _, df = load_decompositions(path)
    rows = ratio_rows(df, sets, predicted_ratios(model, sets)[:, 2])
    overall = rows.groupby("split").agg(
        sets=("log_error", "count"), median_error=("log_error", median_error),
        mape=("log_error", mape),
        measured_ratio=("measured_ratio", "median"), predicted_ratio=("predicted_ratio", "median"),
        label_spread=("label_spread", lambda s: f"{np.median(s) * 100:.1f}%"))
    spearman = rows[["measured_ratio", "predicted_ratio"]].corr(method="spearman").iloc[0, 1]
    quiet = reference_ms(profile)
    if not quiet:
        raise InputError("--profile", f"profile {args.profile!r} has no reference.json", "run `shardplan train` first")
    move = np.log(label_moves(df, profile.dir, quiet))  # `src` names a file of the profile's folder
    ratio_error = -rows["log_error"].to_numpy()  # log measured ratio over predicted
    slope, intercept = np.polyfit(ratio_error, move, 1)
    residual = move - (slope * ratio_error + intercept)
    md = [f"# Sets over their shards alone: `{args.profile}` decompositions ({args.name})", "",
          *provenance(load_before), "",
          f"Measured: `{path}` (real FBGEMM CPU kernel times, {df['date'].min()} to {df['date'].max()}; each set "
          "whole and each shard alone in the same repetitions, the ratio whole / sum alone per repetition, then "
          f"the median). Predicted: `{args.model or 'the committed model'}`, each set whole and each shard alone. "
          "Cells: median signed error of the predicted ratio (negative: the model says the shards slow one "
          "another less than they do) and, in brackets, how many sets. The split is training's for "
          "decompositions (by source row); a model trained without them has learnt none of these ratios.", "",
          "## Overall", "", overall.reset_index().to_markdown(index=False, floatfmt=".3f"), "",
          f"Spearman of predicted and measured ratio: {spearman:.3f}.", "",
          f"## By the clock ({WINDOW_MIN}-minute windows)", "",
          by_the_clock(rows, df, quiet).to_markdown(index=False, floatfmt=".3f"), "",
          "## The whole now against its stored label", "",
          f"The sets' wholes now over their labels (both divided by their reference slowdown): median "
          f"{np.exp(np.median(move)):.3f}, sd of the log {np.std(move, ddof=1) * 100:.1f}%. Correlation of that log "
          f"move with the log of the measured over the predicted ratio: {np.corrcoef(move, ratio_error)[0, 1]:.2f}; "
          f"a line in it (slope {slope:.2f}) leaves an sd of {np.std(residual, ddof=2) * 100:.1f}%. With the "
          f"measured ratio alone: correlation {np.corrcoef(move, np.log(rows['measured_ratio']))[0, 1]:.2f}.", "",
          "## By MB of rows touched a batch", "", binned(rows, "touched_mb", TOUCHED_MB_EDGES).to_markdown(), "",
          "## By shard count", "", binned(rows, "shards", SHARD_EDGES).to_markdown(), "",
          "## Measured ratio by MB touched (median, and the model's)", "",
          rows.groupby(pd.cut(rows["touched_mb"], list(TOUCHED_MB_EDGES)), observed=True)[
              ["measured_ratio", "predicted_ratio"]].median().to_markdown(floatfmt=".3f"), ""]
    if args.paired_with:
        if not args.paired_with.is_file():
            raise InputError("--paired-with", f"no decompositions at {args.paired_with}",
                             "give a file of shardplan collect decompositions")
        md += [f"## Paired with `{args.paired_with}`", "",
               "The same sets, this file's over that one's (medians of per-set ratios):", "",
               paired(df, pd.read_parquet(args.paired_with), rows["touched_mb"] > HEAVY_MB).to_markdown(
                   index=False, floatfmt=".3f"), ""]
    write_report(args.out, f"decomposition-error-{args.name}", md)


if __name__ == "__main__":
    sys.exit(exit_status(main))
