"""A profile's data folder with a targeted collection's sets among its random sets, for training a candidate.

A targeted collection (``shardplan collect compute --min-table-rows ... --out FILE``) is kept in a file of
its own until a model adopts it. To train and score a candidate on it without touching the committed data,
this writes a folder that links every file of the profile's folder but ``compute.parquet``, which it writes
afresh: the profile's random sets with the targeted file's sets that passed the quiet gate
(:func:`shardplan.cost.collect.failed_gate`: a set timed while the reference read more than the gate allows
after its last attempt is left out, as the committed collections' were) put right after the profile's first
seed, where ``cpu-2c-nested``'s ``compute.parquet`` holds its targeted sets (training draws its batches by
position, so the order is part of the recipe). Then::

    .venv/bin/python bench/targeted_data.py --profile cpu-2c-zen4 --extra compute-big-tables.parquet \\
        --out /tmp/zen4-big-tables
    .venv/bin/shardplan train --profile cpu-2c-zen4 --data-dir /tmp/zen4-big-tables \\
        --out data/profiles/cpu-2c-zen4/candidates/big-tables-zipf
    .venv/bin/python bench/heldout_compare.py --profile cpu-2c-zen4 --data-dir /tmp/zen4-big-tables \\
        --models data/profiles/cpu-2c-zen4/candidates/big-tables-zipf/compute-model.json

Prints how many sets of each seed it took.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from shardplan.argtypes import int_list
from shardplan.cost.collect import failed_gate
from shardplan.cost.profiles import get_profile
from shardplan.errors import InputError, exit_status


def with_targeted(base: pd.DataFrame, extra: pd.DataFrame, seeds: Sequence[int] | None = None) -> pd.DataFrame:
    """``base``'s rows with ``extra``'s gate-passing rows (of ``seeds``, default all) after base's first seed."""
    if set(extra["seed"]) & set(base["seed"]):
        raise InputError("--extra", f"shares seeds {sorted(set(extra['seed']) & set(base['seed']))} with "
                         "compute.parquet", "give a targeted collection of seeds of its own")
    if seeds is not None:
        extra = extra[extra["seed"].isin(seeds)]
    passed = extra[~extra.apply(failed_gate, axis=1)].sort_values(["seed", "sample"], kind="stable")
    first = base["seed"] == base["seed"].iloc[0]
    cut = int(first.to_numpy().argmin()) if not first.all() else len(base)  # where the first seed's rows end
    return pd.concat([base.iloc[:cut], passed, base.iloc[cut:]], ignore_index=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True)
    ap.add_argument("--extra", required=True, help="a targeted collection's file in the profile's folder")
    ap.add_argument("--seeds", help="comma-separated seeds of it to take (default all)")
    ap.add_argument("--out", type=Path, required=True, help="the folder to write (must not exist)")
    args = ap.parse_args()
    profile = get_profile(args.profile)
    extra_path = profile.dir / args.extra
    if not extra_path.is_file():
        raise InputError("--extra", f"no file {extra_path}", "name a parquet file of the profile's folder")
    if args.out.exists():
        raise InputError("--out", f"{args.out} exists", "name a folder that does not exist yet")
    seeds = int_list("--seeds", args.seeds) if args.seeds else None
    data = with_targeted(pd.read_parquet(profile.dir / "compute.parquet"), pd.read_parquet(extra_path), seeds)
    args.out.mkdir(parents=True)
    for entry in profile.dir.iterdir():
        if entry.name != "compute.parquet":
            (args.out / entry.name).symlink_to(entry.resolve())
    data.to_parquet(args.out / "compute.parquet", index=False)
    print(f"{args.out / 'compute.parquet'}: {len(data)} sets; per seed {data.groupby('seed').size().to_dict()}")


if __name__ == "__main__":
    sys.exit(exit_status(main))
