"""Column blocks of one table on one rank, timed as they are and joined into one block.

Reads saved plan files (``--plans``, searched recursively), finds every rank
holding two or more column blocks of one table, and times that rank as it
is and with the blocks joined (``merge_colocated_blocks``), the two built
once and visited in turn. Measured = real FBGEMM kernel times (fwd+bwd,
the median over the visits, not divided by the reference: both sides share
the moments); predicted = the committed neural model. Writes
``bench/results/colocated-blocks-<name>.{md,csv}``.

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 taskset -c 1 \\
      .venv/bin/python bench/colocated_blocks.py --plans PLANS_DIR --name NAME
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from shardplan.argtypes import at_least
from shardplan.cost.estimator import load_estimator
from shardplan.cost.kernel import RankOp
from shardplan.cost.profiles import get_profile, load1
from shardplan.cost.specs import rank_specs
from shardplan.domain import Plan
from shardplan.errors import exit_status
from shardplan.execute.measure import MEASURE_ID_SEED
from shardplan.formats import load_plan, write_text_atomic
from shardplan.search.placement import merge_colocated_blocks
from provenance import provenance  # a sibling: bench/ is on sys.path when run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plans", type=Path, required=True, help="folder of plan files (searched recursively)")
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--visits", type=at_least(1), default=4)
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args()
    profile, est = get_profile(args.profile), load_estimator(args.profile)
    load_before, rows = load1(), []
    for path in sorted(args.plans.rglob("*.json")):
        plan = load_plan(path)
        joined = Plan(task=plan.task, tables=tuple(merge_colocated_blocks(plan.task, list(plan.tables))))
        if joined.tables == plan.tables:
            continue
        before, after = rank_specs(plan), rank_specs(joined)
        for r, (a, b) in enumerate(zip(before, after)):
            if len(a) == len(b):
                continue
            ops = [RankOp(s, plan.task.optimizer, plan.task.dtype, profile.device, MEASURE_ID_SEED) for s in (a, b)]
            ms: list[list[float]] = [[], []]
            for visit in range(args.visits):
                for k, op in enumerate(ops):
                    t = op.run(profile.warmup if visit == 0 else 1, max(2, profile.repeats // args.visits))
                    ms[k].append(t.fwd_ms + t.bwd_ms)
            del ops
            pf, pb = est.compute.predict([a, b])
            rows.append({"task": plan.task.name, "rank": r, "blocks_ms": float(np.median(ms[0])),
                         "joined_ms": float(np.median(ms[1])), "blocks_pred_ms": float(pf[0] + pb[0]),
                         "joined_pred_ms": float(pf[1] + pb[1])})
            print(rows[-1], flush=True)
    df = pd.DataFrame(rows)
    df["joined / blocks"] = df.joined_ms / df.blocks_ms
    df["predicted"] = df.joined_pred_ms / df.blocks_pred_ms
    args.out.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out / f"colocated-blocks-{args.name}.csv", index=False)
    print(df.to_string(float_format="%.3f"))
    md = [f"# Column blocks of one table on one rank, joined: {args.name}", "",
          *provenance(load_before), "",
          f"Ranks of the plans in `{args.plans}` that hold two or more column blocks of one table, timed as they are "
          f"and with the blocks joined, the two visited in turn ({args.visits} visits): real FBGEMM CPU kernel times "
          "(fwd+bwd ms, not divided by the reference); predicted: the committed neural model. Joined over blocks, "
          f"measured: median **{df['joined / blocks'].median():.3f}**, range {df['joined / blocks'].min():.3f}-"
          f"{df['joined / blocks'].max():.3f}, slower on {int((df['joined / blocks'] > 1).sum())} of {len(df)}; "
          f"predicted median {df['predicted'].median():.3f}.", "",
          df.to_markdown(index=False, floatfmt=".3f"), ""]
    write_text_atomic(args.out / f"colocated-blocks-{args.name}.md", "\n".join(md))
    print(f"wrote {args.out / f'colocated-blocks-{args.name}.md'}")


if __name__ == "__main__":
    sys.exit(exit_status(main))
