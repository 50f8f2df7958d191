"""What another optimizer or weight type costs on the same shard sets: a profile's stored sets timed in turns.

A profile's cost data holds one optimizer and one weight type, and the
profile refuses tasks of another rather than price them with these timings
(README, "Your own hardware"). This script measures how wrong such pricing
would be, and how the difference is shaped: ``--sets`` of the profile's
stored random sets (``compute.parquet``, a seeded draw; each with the ids
it was labelled with) are built once per kind (``OPTIMIZER:DTYPE``, the
first the base) and timed in turns, ``--visits`` visits of the profile's
repeats each, so drift hits every kind of a set alike. Per set and kind,
forward and backward are the medians over every repeat of every visit; the
report gives each kind's ratio over the base, forward and backward, as
quantiles over the sets, for short and long sets apart, and how the
backward ratio moves with the set's mean width and lookups.

Measured: real FBGEMM kernel times of this host, raw (a ratio within one set
and moment needs no divisor). No model enters.

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 taskset -c 1 \\
        .venv/bin/python bench/optimizer_ratio.py --profile cpu-2c-nested --sets 60 --name s62
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from shardplan.argtypes import at_least
from shardplan.cost.collect import data_kinds, row_id_seed
from shardplan.cost.collect_paired import time_in_turns
from shardplan.cost.kernel import CPU_DTYPES, CPU_OPTIMIZERS, require_kernel, time_reference
from shardplan.cost.profiles import get_profile, load1
from shardplan.cost.specs import specs_from_json
from shardplan.errors import InputError, exit_status
from pooled import add_report_args
from provenance import provenance, write_report

DEFAULT_KINDS = ("sgd:fp32", "rowwise_adagrad:fp32", "adagrad:fp32", "sgd:fp16")
QUANTILES = (0.1, 0.5, 0.9)


def parse_kind(text: str, device: str) -> tuple[str, str]:
    """``OPTIMIZER:DTYPE`` checked against what the profile's device trains (:func:`require_kernel`)."""
    optimizer, _, dtype = text.partition(":")
    if not optimizer or not dtype:
        raise InputError("--kinds", f"{text!r} is not OPTIMIZER:DTYPE",
                         f"e.g. sgd:fp32 rowwise_adagrad:fp32 (CPU: {', '.join(CPU_OPTIMIZERS)} with "
                         f"{', '.join(CPU_DTYPES)})")
    require_kernel(optimizer, dtype, device, fields=("--kinds", "--kinds"))
    return optimizer, dtype


def kind_name(kind: tuple[str, str]) -> str:
    return f"{kind[0]}:{kind[1]}"


def ratio_rows(df: pd.DataFrame, kinds: list[tuple[str, str]], short_ms: float) -> list[str]:
    """Markdown rows: each non-base kind's fwd and bwd ratio quantiles, over all sets and by length."""
    base = kind_name(kinds[0])
    parts = {"all": df, f"under {short_ms:g} ms": df[df.label_ms < short_ms],
             f"{short_ms:g} ms or more": df[df.label_ms >= short_ms]}
    lines = []
    for kind in map(kind_name, kinds[1:]):
        for part, d in parts.items():
            if d.empty:
                continue
            cells = []
            for term in ("fwd", "bwd", "total"):
                r = d[f"{kind} {term}"] / d[f"{base} {term}"]
                cells.append(" / ".join(f"{q:.2f}" for q in r.quantile(list(QUANTILES))))
            lines.append(f"| {kind} | {part} | {len(d)} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu-2c-nested")
    ap.add_argument("--kinds", nargs="+", default=list(DEFAULT_KINDS),
                    help="OPTIMIZER:DTYPE, the first the base the others are divided by "
                         f"(default {' '.join(DEFAULT_KINDS)})")
    ap.add_argument("--sets", type=at_least(1), default=60, help="stored random sets timed (default 60)")
    ap.add_argument("--visits", type=at_least(1), default=3, help="visits per set and kind (default 3)")
    ap.add_argument("--seed", type=at_least(0), default=0, help="which stored sets are drawn")
    add_report_args(ap, "sets labelled under this many ms fwd+bwd are reported apart")
    args = ap.parse_args()
    profile = get_profile(args.profile)
    kinds = [parse_kind(k, profile.device) for k in args.kinds]
    if len(set(kinds)) != len(kinds) or len(kinds) < 2:
        raise InputError("--kinds", f"{args.kinds} must name at least two different kinds",
                         "give the base first, then the kinds to compare with it")
    stored = pd.read_parquet(profile.dir / "compute.parquet")
    (base_opt, base_dtype), = data_kinds(stored) or [("sgd", "fp32")]  # a profile's data is of one kind
    if kinds[0] != (base_opt, base_dtype):
        raise InputError("--kinds", f"the base {args.kinds[0]!r} is not the kind {profile.name!r}'s sets were "
                         f"labelled with ({base_opt}:{base_dtype})", f"put {base_opt}:{base_dtype} first")
    if args.sets > len(stored):
        raise InputError("--sets", f"{args.sets} is more than the {len(stored)} stored sets", "ask for fewer")
    picked = stored.iloc[np.sort(np.random.default_rng(args.seed).choice(len(stored), args.sets, replace=False))]
    profile.use_threads()
    load_before = load1()
    refs = [time_reference(profile.device)]
    rows = []
    for n, (i, r) in enumerate(tqdm(list(picked.iterrows()), desc="sets")):
        specs = specs_from_json(r.shards)
        times = time_in_turns(specs, row_id_seed(r), kinds, profile, args.visits)
        rows.append({"row": i, "num_shards": len(specs), "label_ms": float(r.fwd_ms + r.bwd_ms),
                     "mean_cols": float(np.mean([s.cols for s in specs])),
                     "lookups": float(sum(s.pooling_factor * s.batch_size for s in specs)),
                     **{f"{kind_name(k)} {term}": v for k, (f, b) in times.items()
                        for term, v in (("fwd", f), ("bwd", b), ("total", f + b))}})
        if n % 10 == 9:  # the host's state over the run, for the report
            refs.append(time_reference(profile.device))
    refs.append(time_reference(profile.device))
    df = pd.DataFrame(rows)
    base = kind_name(kinds[0])
    corr = []
    for kind in map(kind_name, kinds[1:]):
        bwd = np.log(df[f"{kind} bwd"] / df[f"{base} bwd"])
        corr.append(f"| {kind} | " + " | ".join(f"{np.corrcoef(bwd, np.log(df[c]))[0, 1]:+.2f}"
                                                 for c in ("label_ms", "mean_cols", "lookups")) + " |")
    raw = df[f"{base} total"] / df.label_ms
    md = [f"# Another optimizer or weight type on the same sets, profile `{args.profile}`", "",
          *provenance(load_before, f"; reference {min(refs):.2f}-{max(refs):.2f} ms over the run. "
                      f"{len(df)} of the profile's stored random sets (seed {args.seed}), each built once per "
                      f"kind and timed in turns, {args.visits} visits of {profile.repeats} repeats. Measured: "
                      f"real FBGEMM kernel times, raw; the base ran {raw.median():.2f}x its stored labels "
                      "(median)."), "",
          f"Ratio over `{base}` on the same set, 10th / 50th / 90th percentile over the sets:", "",
          "| kind | sets | n | forward | backward | forward + backward |", "| --- | --- | --- | --- | --- | --- |",
          *ratio_rows(df, kinds, args.short_ms), "",
          "How the backward ratio moves (correlation of logs over the sets):", "",
          "| kind | with the base label's ms | with mean width | with lookups a batch |", "| --- | --- | --- | --- |",
          *corr]
    write_report(args.out, f"optimizer-ratio-{args.profile}-{args.name}", md, df)


if __name__ == "__main__":
    sys.exit(exit_status(main))
