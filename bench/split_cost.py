"""What splitting a table costs: each split table of the default's plans, timed whole and as its shards.

For every task of a suite, the default searcher's plan; for every table it
splits by columns or rows, the whole table alone (one FBGEMM TBE op, the
global batch) and each of its shards alone (one op each, as its rank would
see it), taking turns repetition by repetition so that machine drift hits
them alike. Reports, per table, the shards' summed time over the whole
table's, measured and predicted: a column block reads every id of its table,
so a split adds work; this says how much, and whether the model knows.
Measured = real FBGEMM CPU kernel times (median over repetitions; raw ms, the
reference workload's slowdown over the profile's quiet time recorded beside
them: the ratio is taken within one repetition, where it cancels);
predicted = the committed neural model. Writes
``bench/results/split-cost-<name>.{md,csv}``.

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 taskset -c 1 \\
      .venv/bin/python bench/split_cost.py --suite data/tasks/cpu-bench --name cpu-bench
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from shardplan.argtypes import at_least
from shardplan.cost.estimator import load_estimator
from shardplan.cost.kernel import RankOp, time_reference
from shardplan.cost.profiles import get_profile, load1, reference_ms
from shardplan.cost.specs import ShardSpec, rank_specs
from shardplan.domain import Plan
from shardplan.errors import exit_status
from shardplan.formats import load_task, write_text_atomic
from shardplan.search import DEFAULT_SEARCHER, get_searcher
from provenance import provenance  # a sibling: bench/ is on sys.path when run

SPLIT_TYPES = ("column_wise", "row_wise", "table_row_wise")


def split_tables(plan: Plan) -> dict[str, tuple[str, list[ShardSpec]]]:
    """Per split table of ``plan``: its sharding type and its shards' specs (from every rank)."""
    kinds = {t.name: t.sharding_type for t in plan.tables if t.sharding_type in SPLIT_TYPES}
    out: dict[str, tuple[str, list[ShardSpec]]] = {}
    for specs in rank_specs(plan):
        for s in specs:
            if s.table in kinds:
                out.setdefault(s.table, (kinds[s.table], []))[1].append(s)
    return out


def whole_of(kind: str, shards: list[ShardSpec]) -> ShardSpec:
    """The unsplit table the shards came from: all its rows and columns."""
    first = shards[0]
    cols = sum(s.cols for s in shards) if kind == "column_wise" else first.cols
    return replace(first, row_offset=0, rows=first.table_rows, cols=cols)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--suite", default="data/tasks/cpu-bench")
    ap.add_argument("--repeats", type=at_least(1), default=7, help="repetitions (whole and shards take turns)")
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args()
    profile = get_profile(args.profile)
    profile.use_threads()
    est = load_estimator(args.profile)
    quiet = reference_ms(profile)
    load_before = load1()
    rows = []
    for path in tqdm(sorted(Path(args.suite).glob("*.json")), desc=f"split cost [{Path(args.suite).name}]"):
        task = load_task(path)
        plan = get_searcher(DEFAULT_SEARCHER).plan(task, est, seed=0)
        for table, (kind, shards) in split_tables(plan).items():
            variants = {"whole": [whole_of(kind, shards)], "shards": shards}
            predicted = {k: sum(f + b for f, b in est.rank_compute([[s] for s in v])) for k, v in variants.items()}
            ops = {k: [RankOp([s], task.optimizer, task.dtype, profile.device) for s in v]
                   for k, v in variants.items()}
            measured: dict[str, list[float]] = {k: [] for k in ops}
            refs = []
            for _ in range(args.repeats):
                refs.append(time_reference(profile.device))
                for k, oo in ops.items():
                    measured[k].append(sum(t.fwd_ms + t.bwd_ms for t in (o.run(3, 10) for o in oo)))
            whole = variants["whole"][0]
            ratio = np.array(measured["shards"]) / np.array(measured["whole"])
            rows.append({"task": task.name, "table": table, "sharding_type": kind, "shards": len(shards),
                         "rows": whole.rows, "cols": whole.cols, "pooling_factor": whole.pooling_factor,
                         "zipf_alpha": whole.zipf_alpha, "batch_size": whole.batch_size,
                         "measured_whole_ms": float(np.median(measured["whole"])),
                         "measured_shards_ms": float(np.median(measured["shards"])),
                         "measured_ratio": float(np.median(ratio)),
                         "predicted_whole_ms": predicted["whole"], "predicted_shards_ms": predicted["shards"],
                         "predicted_ratio": predicted["shards"] / predicted["whole"],
                         "slowdown": float(np.median(refs)) / quiet if quiet else None})
    df = pd.DataFrame(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out / f"split-cost-{args.name}.csv", df.to_csv(index=False))
    df["measured / predicted ratio"] = df.measured_ratio / df.predicted_ratio
    summary = df.groupby("sharding_type").agg(
        tables=("table", "size"), measured_ratio_median=("measured_ratio", "median"),
        predicted_ratio_median=("predicted_ratio", "median"),
        under_priced=("measured / predicted ratio", lambda x: f"{int((x > 1).sum())} of {len(x)}")).reset_index()
    md = [f"# What splitting a table costs: {args.name}", "",
          *provenance(load_before, f"; reference slowdown {df.slowdown.min():.2f}-{df.slowdown.max():.2f}x."), "",
          f"Every table `{DEFAULT_SEARCHER}` splits on `{args.suite}`, timed whole and as its shards (each alone, "
          f"one op; {args.repeats} repetitions taking turns, median): real FBGEMM CPU kernel times, raw ms. "
          "Predicted: the committed neural model, each shard priced alone. Ratio = the shards' summed time over "
          "the whole table's (above 1: the split adds work).", "",
          summary.to_markdown(index=False, floatfmt=".3f"), "",
          df.drop(columns=["slowdown"]).to_markdown(index=False, floatfmt=".3f"), ""]
    write_text_atomic(args.out / f"split-cost-{args.name}.md", "\n".join(md))
    print("\n".join(md[:8]))
    print(f"wrote {args.out / f'split-cost-{args.name}.md'}")


if __name__ == "__main__":
    sys.exit(exit_status(main))
