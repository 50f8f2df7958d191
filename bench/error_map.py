"""Where on the map of rank sizes a compute model errs: its signed error on stored cost data, by rows touched
and by length.

Each stored set with an absolute label (random shard sets, whole plan ranks,
the larger sets) is predicted by the model and compared with its label,
divided by the profile's reference slowdown as ``shardplan train`` divides
it; random sets (no ``plan-rank`` source) are scored at the random sets'
learnt level, plan ranks at the level a searcher sees, as training scores
them. The signed error (log of predicted over measured: negative, the model
is under) is binned by the megabytes of rows a set touches a batch (the
distinct rows its ids hit, times their width: what must come through the
cache) and by its measured ms, per file and split (trained on / held out)
and quiet gate (passed / failed); and, over the sets that did not fail the
gate, by the batch a set is fed and whether it holds more shards than the
random sets' own draw makes (a level that moves with the batch on long sets
is a gap in the training data, not noise: session 87's many-shard sets at
batch 512 on the Zen 4).

Why: labels taken in different hours on this shared VM sit at different
levels, and not alike for every set: a file whose errors grow with the rows
touched was labelled on a host whose memory system was slower (or faster)
than the one the model learnt its level from. Measured = the files' real
FBGEMM CPU timings; predicted = ``--model`` (default: the profile's committed
model). Hot and crowded mixes (``compute-hot-mixes.parquet``,
``compute-crowded-mixes.parquet``) are labelled by neighbour calibration,
already on the stored plan ranks' host: they are not divided and are scored at
the plan level. A file is split into trained on / held out when the model's
metadata says it learnt from it, else it is "not trained on". A last table
says, per fifth of measured ms, how many sets the set context's bound prices
(their factor outside the range it took on the training sets) and what the
error would be without it.
Writes ``bench/results/error-map-<name>.md``.

    .venv/bin/python bench/error_map.py --profile cpu-2c-xeon --name cpu-2c-xeon \\
      --files compute.parquet compute-ranks.parquet compute-ranks-b.parquet compute-large.parquet
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from shardplan.cost.collect import failed_gate
from shardplan.cost.collect_hot import RECIPES
from shardplan.cost.estimator import load_estimator
from shardplan.cost.features import touched_bytes
from shardplan.cost.model import NeuralCostModel
from shardplan.cost.profiles import get_profile, load1, reference_ms
from shardplan.cost.specs import ShardSpec
from shardplan.cost.split import holdout_mask
from shardplan.cost.train import load_sets
from shardplan.errors import InputError, exit_status
from provenance import provenance, write_report  # a sibling: bench/ is on sys.path when run

CALIBRATED_SOURCES = {source for _, _, source in RECIPES.values()}  # neighbour-calibrated mixes: not divided
TOUCHED_MB_EDGES = (0, 1, 4, 8, 16, 32, 64, np.inf)
MS_EDGES = (0, 2, 4, 8, 16, 32, np.inf)
MANY_SHARDS = 16  # the random sets' own draw stops at 15 shards; beyond it, a set only a targeted draw makes
PREDICTED_MS_EDGES = (0, 1, 2, 3, 5, 8, 12, 20, 40, np.inf)


def trained_files(model: NeuralCostModel) -> set[str]:
    """The names of the files the model's metadata says it learnt from."""
    return {Path(part.strip()).name for part in str(model.metadata.get("trained_on", "")).split("+") if part.strip()}


def error_rows(path: Path, model: NeuralCostModel, nominal: float) -> pd.DataFrame:
    """One row per absolute-labelled set of ``path``: its split (training's hold-out rule for the files
    the model learnt from; "not trained on" for the rest), shard count, MB touched, measured and predicted
    fwd+bwd ms and signed log error."""
    sources = pd.read_parquet(path, columns=["source"])["source"] if "source" in pq.read_schema(path).names \
        else pd.Series(dtype=str)
    plan_ranks, calibrated = (sources == "plan-rank").any(), sources.isin(CALIBRATED_SOURCES).any()
    sets, fwd, bwd, meta = load_sets(path, None if calibrated else nominal,
                                     source="plan-rank" if plan_ranks else None)
    random_level = not (plan_ranks or calibrated)
    pred_f, pred_b = model.predict(sets, random_level=random_level)
    free_f, free_b = model.predict(sets, random_level=random_level, bounded=False)
    measured, predicted = fwd + bwd, pred_f + pred_b
    split = np.where(holdout_mask(meta), "held out", "trained on") if path.name in trained_files(model) \
        else "not trained on"
    return pd.DataFrame({"file": path.name, "split": split, "gate": quiet_gate(meta),
                         "batch": [set_batch(s) for s in sets],
                         "shards": [len(s) for s in sets], "touched_mb": [touched_bytes(s) / 2**20 for s in sets],
                         "measured_ms": measured, "predicted_ms": predicted,
                         "log_error": np.log(predicted / measured),
                         "on_bound": model.on_bound(sets).any(axis=1),
                         "log_error_unbounded": np.log((free_f + free_b) / measured)})


def quiet_gate(meta: pd.DataFrame) -> list[str]:
    """Per row, whether its timing passed the collector's quiet gate after its last attempt ("passed",
    "failed"; :func:`shardplan.cost.collect.failed_gate`), or "n/a" where the file keeps no reference
    readings to judge it by: training learns from failed rows too, but a row timed while the reference ran
    slow is a weaker label."""
    if not {"ref_before_ms", "ref_after_ms", "quiet_ms"} <= set(meta.columns):
        return ["n/a"] * len(meta)
    return ["failed" if failed_gate(r) else "passed" for r in meta.to_dict("records")]


def set_batch(specs: list[ShardSpec]) -> str:
    """The batch a set's shards are fed, or "mixed" for a rank that holds ops of several batches."""
    batches = {s.batch_size for s in specs}
    return str(batches.pop()) if len(batches) == 1 else "mixed"


def mape(log_error: pd.Series) -> str:
    """The mean absolute error, |predicted / measured - 1|, as a percentage."""
    return f"{np.mean(np.abs(np.expm1(log_error))) * 100:.1f}%"


def median_error(log_error: pd.Series) -> str:
    """The median of signed log errors as a signed percentage of the measured time."""
    return f"{np.expm1(np.median(log_error)) * 100:+.1f}%"


def binned(rows: pd.DataFrame, column: str, edges: tuple[float, ...]) -> pd.DataFrame:
    """Median signed error in % (and count) per file and bin of ``column``: a markdown-ready table."""
    bins = pd.cut(rows[column], list(edges))
    cell = lambda e: f"{median_error(e)} ({len(e)})"  # noqa: E731
    table = rows.groupby(["file", bins], observed=True).log_error.agg(cell).unstack(column)
    return table.fillna("")


def spread_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per file and band of *predicted* ms, the shape of the signed log error: median, mean, standard
    deviation, skew and the share beyond 15% either way. Banded by the prediction, not the label, so a
    label a busy neighbour slowed stays in its set's band (banded by measured ms it moves to a longer
    band, and every band's median leans by the noise); a noisy band is wide, and a skewed one has labels
    far off on one side, which the squared loss follows and the median does not."""
    bands = pd.cut(rows["predicted_ms"], list(PREDICTED_MS_EDGES))
    table = rows.groupby(["file", bands], observed=True).log_error.agg(
        sets="count", median=median_error, mean=lambda e: f"{np.expm1(np.mean(e)) * 100:+.1f}%",
        sd=lambda e: f"{np.std(e):.3f}", skew=lambda e: f"{pd.Series(e).skew():+.2f}",
        beyond_15=lambda e: f"{np.mean(np.abs(np.expm1(e)) > 0.15) * 100:.0f}%")
    return table.reset_index().rename(columns={"predicted_ms": "predicted ms", "beyond_15": "beyond 15%"})


def batch_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per file, split, length (fewer shards than ``MANY_SHARDS`` or not) and batch: the sets' count, median
    signed error and MAPE, over the sets that did not fail the quiet gate. Where a model's level moves with
    the batch on long sets, its training data lacks them (session 87: sets of 20-45 shards at batch 512
    priced a median 15% low on the Zen 4 where those at 1,024 were within 7%)."""
    kept = rows[rows["gate"] != "failed"]
    length = np.where(kept["shards"] >= MANY_SHARDS, f">= {MANY_SHARDS} shards", f"< {MANY_SHARDS} shards")
    return kept.assign(length=length).groupby(["file", "split", "length", "batch"]).log_error.agg(
        sets="count", median=median_error, mape=mape).reset_index()


def on_bound_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per file and fifth of measured ms: how many sets have their context on ``context_range`` (the
    bound, not the network, prices them), and the median signed error with and without the bound."""
    fifth = rows.groupby("file").measured_ms.transform(lambda ms: pd.qcut(ms, 5, labels=False, duplicates="drop"))
    table = rows.assign(fifth=fifth + 1).groupby(["file", "fifth"]).agg(
        sets=("log_error", "count"), median_ms=("measured_ms", lambda ms: f"{np.median(ms):.1f}"),
        on_bound=("on_bound", "sum"), error=("log_error", median_error),
        unbounded=("log_error_unbounded", median_error))
    return table.reset_index()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--files", nargs="+", required=True,
                    help="stored cost-data files with absolute labels, in the profile's folder or given by path")
    ap.add_argument("--model", help="compute-model file (default: the profile's committed one)")
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args()
    profile = get_profile(args.profile)
    paths = [p if p.exists() else profile.dir / p for p in map(Path, args.files)]
    for given, p in zip(args.files, paths):
        if not p.exists():
            raise InputError("--files", f"{given} is neither a file nor one of {profile.dir}'s",
                             "name a stored cost-data parquet file")
    model = load_estimator(args.profile, args.model).compute
    if not isinstance(model, NeuralCostModel):
        raise InputError("--model", "is not a neural compute model", "give a compute-model.json file")
    load_before = load1()
    nominal = reference_ms(profile)  # the quiet reference training divided the labels by (its reference.json)
    if not nominal:
        raise InputError("--profile", f"profile {args.profile!r} has no reference.json", "run `shardplan train` first")
    rows = pd.concat([error_rows(p, model, nominal) for p in paths], ignore_index=True)
    overall = rows.groupby(["file", "split", "gate"]).log_error.agg(sets="count", median=median_error, mape=mape)
    md = [f"# Where the `{args.profile}` model errs on stored cost data ({args.name})", "",
          *provenance(load_before), "",
          f"Measured: the files' real FBGEMM CPU timings, divided by the reference slowdown as training divides "
          f"them (quiet reference {nominal:.4f} ms); hot mixes are neighbour-calibrated labels, on the stored plan "
          f"ranks' host, and are not divided. Predicted: `{args.model or 'the committed model'}`; random "
          "sets at the random sets' learnt level, plan ranks at the plan level. Cells: median signed error "
          "(negative: the model is under the label) and, in brackets, how many sets.", "",
          "## Per file and split", "", overall.reset_index().to_markdown(index=False), "",
          "## By the sets' batch and length (sets that failed the quiet gate left out)", "",
          batch_table(rows).to_markdown(index=False), "",
          "## By MB of rows touched a batch", "", binned(rows, "touched_mb", TOUCHED_MB_EDGES).to_markdown(), "",
          "## By measured ms", "", binned(rows, "measured_ms", MS_EDGES).to_markdown(), "",
          "## The error's spread, by predicted ms", "",
          "Signed log error per band of the model's own figure (log sd; skew below 0: labels far above the "
          "model, as slowed timings are).", "", spread_table(rows).to_markdown(index=False), "",
          "## The set context on its bounds, by fifth of measured ms", "",
          "Sets whose context (the factor of either head, of any of their ops) lies outside the range it took "
          "on the training sets are priced at the bound; `unbounded` is the median error the network alone "
          "would make there.", "", on_bound_table(rows).to_markdown(index=False), ""]
    write_report(args.out, f"error-map-{args.name}", md)


if __name__ == "__main__":
    sys.exit(exit_status(main))
