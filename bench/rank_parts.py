"""A plan rank taken apart: the rank whole, each shard alone, and its heaviest shard at other Zipf exponents.

Where the model misses a rank, this says whether the miss is in one shard's own price (the shard alone
misses as much) or in how the model adds the shards up (each alone priced well, the whole not), and, for
the rank's heaviest shard (the largest predicted alone), how the model's response to the ids' skew
compares with the kernel's (the same shard timed at the other ``--alphas``). Every set is timed as the
cost labels are (one FBGEMM op, the profile's warm-up and timed iterations, divided by the reference's
slowdown), in turns (``rank_drift.time_in_turns``), so a disturbed spell of the host falls on all of them
alike. Measured: real FBGEMM CPU kernel times; predicted: the committed neural model of the profile (and
``--model``, a candidate's file). Prints a table and writes ``bench/results/rank-parts-<name>.{md,csv}``.

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 taskset -c 1 .venv/bin/python \\
      bench/rank_parts.py --task data/tasks/unseen-d/unseen-d-13.json --rank 5 --profile cpu-2c-zen4
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from shardplan.argtypes import at_least
from shardplan.cost.collect import quiet_reference_ms
from shardplan.cost.estimator import load_estimator
from shardplan.cost.profiles import get_profile, load1
from shardplan.cost.specs import ShardSpec, rank_specs
from shardplan.errors import InputError, exit_status
from shardplan.formats import load_task
from shardplan.search import get_searcher
from provenance import provenance, write_report  # siblings: bench/ is on sys.path when run
from rank_drift import TimedSet, time_in_turns


def parts(specs: list[ShardSpec], heaviest: int, alphas: list[float]) -> dict[str, list[ShardSpec]]:
    """The sets to time: the rank whole, each shard alone, the heaviest shard at each other exponent."""
    sets = {"whole": list(specs)}
    sets.update({f"alone {i}: {s.table}": [s] for i, s in enumerate(specs)})
    for a in alphas:
        sets[f"heaviest at alpha {a:g}"] = [dataclasses.replace(specs[heaviest], zipf_alpha=a)]
    return sets


def summary(readings: pd.DataFrame, predicted: dict[str, dict[str, float]]) -> pd.DataFrame:
    """Per set: its median reading and each model's price and error; last, the sum of the shards alone
    (measured and priced) and the whole over it: how the kernel and each model add the shards up."""
    med = readings.groupby("rank", sort=False)["ms"].median()
    rows = [{"set": k, "measured ms": m, **{f"{n} ms": p[k] for n, p in predicted.items()},
             **{f"{n} error": p[k] / m - 1 for n, p in predicted.items()}} for k, m in med.items()]
    alone = [k for k in med.index if k.startswith("alone ")]
    summed = float(med[alone].sum())
    rows.append({"set": "whole over the shards alone", "measured ms": float(med["whole"]) / summed,
                 **{f"{n} ms": p["whole"] / sum(p[k] for k in alone) for n, p in predicted.items()}})
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", required=True, help="a task file")
    ap.add_argument("--rank", type=at_least(0), required=True, help="the rank of the plan to take apart")
    ap.add_argument("--searcher", default="torchrec")
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--model", type=Path, help="a candidate's compute-model.json to price beside the committed one")
    ap.add_argument("--alphas", default="0.8,1.05", help="comma-separated Zipf exponents for the heaviest shard")
    ap.add_argument("--reps", type=at_least(1), default=6, help="turns; each times every set once per id seed")
    ap.add_argument("--pause", type=at_least(0, float), default=2.0, help="seconds between turns")
    ap.add_argument("--name", required=True, help="results file stem suffix")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    profile = get_profile(args.profile)
    profile.use_threads()
    if args.model is not None and not args.model.is_file():
        raise InputError("--model", f"no model file at {args.model}", "give a compute-model.json")
    try:
        alphas = [float(a) for a in args.alphas.split(",") if a]
    except ValueError:
        raise InputError("--alphas", f"must be comma-separated numbers, got {args.alphas!r}", "e.g. 0.8,1.05") from None
    task = load_task(args.task)
    est = load_estimator(profile.name)
    specs = rank_specs(get_searcher(args.searcher).plan(task, est))
    if args.rank >= len(specs) or not specs[args.rank]:
        raise InputError("--rank", f"rank {args.rank} holds no shards in {args.searcher}'s plan of {task.name}",
                         f"give a rank among {[i for i, s in enumerate(specs) if s]}")
    rank = specs[args.rank]
    models = {"committed": est, **({"candidate": load_estimator(profile.name, str(args.model))} if args.model else {})}
    alone_f, alone_b = est.compute.predict([[s] for s in rank])
    sets = parts(rank, int(np.argmax(alone_f + alone_b)), alphas)
    predicted = {n: dict(zip(sets, np.add(*m.compute.predict(list(sets.values()))))) for n, m in models.items()}
    load_before = load1()
    readings = time_in_turns({k: TimedSet(v, task.optimizer, task.dtype) for k, v in sets.items()}, profile,
                             quiet_reference_ms(profile), args.reps, args.pause)
    table = summary(readings, predicted)
    md = [f"# {args.searcher}'s rank {args.rank} of `{task.name}` taken apart", "",
          *provenance(load_before, f"; reference {readings.slowdown.min():.2f}-{readings.slowdown.max():.2f}x "
                                   "quiet."), "",
          f"Measured: real FBGEMM CPU kernel times, each set one op ({profile.warmup} warm-up, {profile.repeats} "
          f"timed iterations) divided by the reference's slowdown, medians of {args.reps} turns "
          f"{args.pause:g} s apart. Predicted: the committed neural `{profile.name}` model"
          + (f" and the candidate `{args.model}`" if args.model else "") + ".", "",
          "Shards: " + "; ".join(f"{s.table} {s.rows}x{s.cols}, pooling {s.pooling_factor:g}, "
                                 f"alpha {s.zipf_alpha:g}, batch {s.batch_size}" for s in rank), "",
          table.to_markdown(index=False, floatfmt=".3f"), ""]
    write_report(Path(args.out), f"rank-parts-{args.name}", md, readings)


if __name__ == "__main__":
    sys.exit(exit_status(main))
