"""Several compute models scored on one held-out split of a profile's data.

Each model's training report scores it on the split its own data held out,
so a model trained before the data grew and one trained after are judged on
different sets. This script scores every model given on the sets the
profile's data holds out today (``is_holdout``: by seed and sample, so a set
held out then is held out now, and a set added since was seen by neither):
the random sets of ``compute.parquet``, the larger sets of
``compute-large.parquet`` (and of any ``compute-large-*.parquet``) and the plan ranks of ``compute-ranks.parquet``
(where each is present). Each larger split is scored again on its sets past the largest set in any file
the committed model learnt from (plan ranks reach past the random sets trained on): the strict reading of
"larger than any seen in training".

Labels: on a CPU profile, the real FBGEMM kernel times divided by the
machine's slowdown as ``shardplan train`` divides them today ("as
labelled"), and undivided ("as timed"); where the data folder holds re-timings
(``retimes/``), also as ``shardplan train --retimes`` labels them ("median
of re-timings"). On a GPU profile, as timed only,
with each model priced at each set's own host reference (``host_state.by_op``,
as ``--host-reference-ms`` prices a host): the labels a GPU model learns are
its own training's adjustment, so they would differ between the models.
Random and larger sets are priced at the random collector's level, plan
ranks at plan ranks' (as the reports do). Prints a table and writes
``bench/results/heldout-compare-<profile>[-NAME].{md,csv}``.

    .venv/bin/python bench/heldout_compare.py --profile h200 \\
        --models data/profiles/h200/candidates/session-42/compute-model.json
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from shardplan.cost.host_state import by_op, sample_reference_ms
from shardplan.cost.model import NeuralCostModel
from shardplan.cost.profiles import get_profile, load1
from shardplan.cost.split import holdout_mask
from shardplan.cost.train import load_retimes, load_sets, metrics, reference_nominal
from shardplan.errors import InputError, exit_status
from error_map import trained_files
from provenance import provenance, write_report  # siblings: bench/ is on sys.path when run


def shown(path: Path) -> str:
    """A model file as the table names it: relative to the working directory where it lies below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def largest_trained(model: NeuralCostModel, data_dir: Path) -> int:
    """The most shards in one set of any file ``model`` learnt from that ``data_dir`` holds (0 where none):
    its held-out rows counted too, so a set past it is past every set the model saw."""
    sizes = [int(pd.read_parquet(p, columns=["num_shards"])["num_shards"].max())
             for p in (data_dir / name for name in trained_files(model)) if p.exists()]
    return max(sizes, default=0)


def score_cells(pf: np.ndarray, pb: np.ndarray, fwd: np.ndarray, bwd: np.ndarray) -> dict[str, str]:
    """A results row's cells for predictions ``pf``/``pb`` against labels ``fwd``/``bwd``: MAPE per head and
    fwd+bwd, Spearman, the share within 15% and the median signed error (fwd+bwd)."""
    m = metrics(pf, pb, fwd, bwd)
    err = (pf + pb) / (fwd + bwd) - 1
    return {**{f"{k} MAPE": f"{100 * m[k]['mape']:.1f}%" for k in ("fwd", "bwd", "fwd+bwd")},
            "fwd+bwd Spearman": f"{m['fwd+bwd']['spearman']:.3f}",
            "within 15%": f"{100 * (np.abs(err) <= 0.15).mean():.1f}%",
            "median signed": f"{100 * np.median(err):+.1f}%"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True)
    ap.add_argument("--models", nargs="*", default=[], help="model files besides the profile's committed one")
    ap.add_argument("--data-dir", type=Path, help="the data folder (default: the profile's)")
    ap.add_argument("--name", help="results file stem suffix")
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args()
    load_before = load1()
    profile = get_profile(args.profile)
    data_dir = args.data_dir or profile.dir
    if not (data_dir / "compute.parquet").exists():
        raise InputError("--data-dir", f"no compute.parquet in {data_dir}", "name a profile's data folder")
    paths = [profile.dir / "compute-model.json", *map(Path, args.models)]
    for p in paths:
        if not p.exists():
            raise InputError("--models", f"no model file {p}", "name compute-model.json files")
    models = {shown(p): NeuralCostModel.load(p, profile.name) for p in paths}
    cpu = profile.device == "cpu"
    nominal = reference_nominal(pd.read_parquet(data_dir / "compute.parquet",
                                                columns=["ref_before_ms", "ref_after_ms"]))

    retimed = load_retimes(data_dir)
    past = largest_trained(next(iter(models.values())), data_dir)
    # (split, labels) -> sets, fwd, bwd, per-set host reference, priced at the random collector's level
    splits: dict[tuple[str, str], tuple[list, np.ndarray, np.ndarray, np.ndarray, bool]] = {}
    more_larger = [(f"larger sets ({p.stem.removeprefix('compute-')})", p.name, None, False, True)
                   for p in sorted(data_dir.glob("compute-large-*.parquet"))]  # further collections, never trained on
    for split, file, source, held_only, random_level in (
            ("held-out random sets", "compute.parquet", None, True, True),
            ("larger sets", "compute-large.parquet", None, False, True), *more_larger,
            ("held-out plan ranks", "compute-ranks.parquet", "plan-rank", True, False)):
        path = data_dir / file
        if not path.exists():
            continue
        recipes = [("as labelled", nominal, []), ("as timed", None, [])] if cpu else [("as timed", None, [])]
        if cpu and retimed:
            recipes.insert(1, ("median of re-timings", nominal, retimed))
        for labels, divisor, retimes in recipes:
            sets, fwd, bwd, df = load_sets(path, divisor, source=source, window_s=profile.slowdown_window_s,
                                           retimes=retimes)
            keep = holdout_mask(df) if held_only else np.ones(len(df), bool)
            idx = np.flatnonzero(keep)
            splits[(split, labels)] = ([sets[i] for i in idx], fwd[idx], bwd[idx],
                                       sample_reference_ms(df)[idx], random_level)
            beyond = [i for i in idx if len(sets[i]) > past] if split.startswith("larger") else []
            if beyond and len(beyond) < len(idx):
                splits[(f"{split}, past {past} shards", labels)] = (
                    [sets[i] for i in beyond], fwd[beyond], bwd[beyond], sample_reference_ms(df)[beyond],
                    random_level)

    rows = []
    for (split, labels), (sets, fwd, bwd, ref, random_level) in splits.items():
        for path, model in models.items():
            if cpu:
                pf, pb = model.predict(sets, random_level=random_level)  # a no-op where none was learnt
            else:  # each set at its own host state, op by op, as a GPU model prices a host
                pf, pb = by_op(model, sets, ref)
            rows.append({"split": split, "labels": labels, "sets": len(sets), "model": path,
                         **score_cells(pf, pb, fwd, bwd)})
    table = pd.DataFrame(rows)
    how = ("labels real FBGEMM CPU kernel times, as labelled (divided by each sample's slowdown over the quiet "
           f"reference {nominal:.4f} ms), "
           + (f"as the median of each row's timings where {len(retimed)} re-timing files hold more, " if retimed
              else "") + "and as timed" if cpu else
           "labels real FBGEMM CUDA kernel times as timed; each model priced at each set's own host reference")
    md = [f"# Compute models on one held-out split, profile `{args.profile}`", "",
          *provenance(load_before, f". Data: `{data_dir}`; {how}. Predicted: each named neural model."), "",
          f"The largest set in the files the committed model learnt from has {past} shards: a split named "
          f"\"past {past} shards\" holds its larger sets beyond every set trained on.", "",
          table.to_markdown(index=False), ""]
    write_report(args.out, f"heldout-compare-{args.profile}" + (f"-{args.name}" if args.name else ""), md, table)


if __name__ == "__main__":
    sys.exit(exit_status(main))
