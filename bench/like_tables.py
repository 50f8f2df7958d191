"""N like tables in one op against the same N each alone: where a set stops fitting the cache.

A plan rank of many tables that each fit the cache alone is the kind the model prices lowest on the Xeon
(TorchRec's `unseen-c-06` rank 0: 28 shards at batch 1,024, 26 of them touching under 4 MB of rows a batch, a
median 0.17 MB, 21 MB together). This takes the shape apart with one table repeated: ``--counts`` sets of N
tables of the same rows, dim, pooling and Zipf exponent (each its own table name, so each scatters its hot
rows elsewhere), every set whole and every table alone, timed in turns as the cost labels are
(``rank_drift.time_in_turns``: one FBGEMM op, the profile's warm-up and timed iterations, divided by the
reference's slowdown). The whole over the sum of its tables alone stays near or under 1 while the set's rows
touched fit the cache (one op's fixed costs are shared) and climbs once they do not, each table's rows having
stayed cached between calls when it ran alone. Measured: real FBGEMM CPU kernel times; predicted: the
committed neural model of the profile (and ``--model``, a candidate's file), its whole over its own price of
the tables alone. Prints a table and writes ``bench/results/like-tables-<name>.{md,csv}``.

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 taskset -c 1 .venv/bin/python \\
      bench/like_tables.py --profile cpu-2c-xeon --rows 200000 --cols 32 --pooling 20 --alpha 0.9 \\
      --batch 1024 --name cpu-2c-xeon-200k-32
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from shardplan.argtypes import at_least, int_list
from shardplan.cost.collect import quiet_reference_ms
from shardplan.cost.estimator import load_estimator
from shardplan.cost.features import touched_bytes
from shardplan.cost.profiles import get_profile, load1
from shardplan.cost.specs import ShardSpec
from shardplan.errors import InputError, exit_status
from provenance import provenance, write_report  # siblings: bench/ is on sys.path when run
from rank_drift import TimedSet, time_in_turns

ID_SEED = (101,)  # one draw of ids per set: the tables differ by name, so their hot rows do too


def like_sets(spec: ShardSpec, counts: list[int]) -> dict[str, list[ShardSpec]]:
    """``n=N`` for each count (the first N tables together) and ``alone i`` for each table."""
    tables = [ShardSpec(f"like-{i}", spec.table_rows, 0, spec.rows, spec.cols, spec.pooling_factor,
                        spec.zipf_alpha, spec.batch_size) for i in range(max(counts))]
    return {**{f"n={n}": tables[:n] for n in counts}, **{f"alone {i}": [t] for i, t in enumerate(tables)}}


def summary(sets: dict[str, list[ShardSpec]], measured: pd.Series, predicted: dict[str, dict[str, float]]
            ) -> pd.DataFrame:
    """Per count: rows touched a batch, the whole measured, and the whole over the sum of its tables alone,
    measured and as each model prices both."""
    rows = []
    for key, specs in sets.items():
        if not key.startswith("n="):
            continue
        alone = [f"alone {i}" for i in range(len(specs))]
        rows.append({"tables": len(specs), "touched MB": touched_bytes(specs) / 2**20,
                     "whole ms": float(measured[key]),
                     "whole / alone, measured": float(measured[key] / measured[alone].sum()),
                     **{f"whole / alone, {n}": p[key] / sum(p[a] for a in alone) for n, p in predicted.items()}})
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--rows", type=at_least(1), required=True)
    ap.add_argument("--cols", type=at_least(1), required=True)
    ap.add_argument("--pooling", type=at_least(0.0, float), required=True)
    ap.add_argument("--alpha", type=at_least(0.0, float), default=1.05)
    ap.add_argument("--batch", type=at_least(1), default=1024)
    ap.add_argument("--counts", default="1,2,4,8,16,24", help="how many like tables each set holds")
    ap.add_argument("--model", type=Path, help="a candidate's compute-model.json to price beside the committed one")
    ap.add_argument("--reps", type=at_least(1), default=5, help="turns")
    ap.add_argument("--pause", type=at_least(0, float), default=1.0, help="seconds between turns")
    ap.add_argument("--name", required=True, help="results file stem suffix")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    counts = int_list("--counts", args.counts)
    if not counts or min(counts) < 1:
        raise InputError("--counts", f"must be positive integers, got {args.counts!r}", "e.g. 1,2,4,8,16")
    if args.model is not None and not args.model.is_file():
        raise InputError("--model", f"no model file at {args.model}", "give a compute-model.json")
    profile = get_profile(args.profile)
    profile.use_threads()
    spec = ShardSpec("like", args.rows, 0, args.rows, args.cols, args.pooling, args.alpha, args.batch)
    sets = like_sets(spec, counts)
    est = load_estimator(profile.name)
    models = {"committed": est, **({"candidate": load_estimator(profile.name, str(args.model))} if args.model else {})}
    predicted = {n: dict(zip(sets, np.add(*m.compute.predict(list(sets.values()))))) for n, m in models.items()}
    load_before = load1()
    readings = time_in_turns({k: TimedSet(v, "sgd", "fp32", ID_SEED) for k, v in sets.items()}, profile,
                             quiet_reference_ms(profile), args.reps, args.pause)
    table = summary(sets, readings.groupby("rank", sort=False)["ms"].median(), predicted)
    md = [f"# {len(counts)} sets of like tables whole and alone ({args.name})", "",
          *provenance(load_before, f"; reference {readings.slowdown.min():.2f}-{readings.slowdown.max():.2f}x "
                                   "quiet."), "",
          f"Each table {args.rows:,} rows x {args.cols}, pooling {args.pooling:g}, Zipf exponent {args.alpha:g}, "
          f"batch {args.batch:,} (sgd, fp32). Measured: real FBGEMM CPU kernel times, each set one op "
          f"({profile.warmup} warm-up, {profile.repeats} timed iterations) divided by the reference's slowdown, "
          f"medians of {args.reps} turns. Predicted: the committed neural `{profile.name}` model"
          + (f" and the candidate `{args.model}`" if args.model else "") + ", each whole over its own price of "
          "the tables alone.", "", table.to_markdown(index=False, floatfmt=".2f"), ""]
    write_report(Path(args.out), f"like-tables-{args.name}", md, readings)


if __name__ == "__main__":
    sys.exit(exit_status(main))
