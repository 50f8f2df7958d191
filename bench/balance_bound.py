"""How much of TorchRec's plan cost balance alone can remove, read off a committed bench run.

For each task TorchRec planned, three ratios to TorchRec's plan cost:

- ``bound``: TorchRec's own predicted compute spread perfectly evenly over its
  ranks (the slowest rank's comm kept), over TorchRec's predicted plan cost.
  A searcher that only rebalances TorchRec's work gets no lower than this.
- ``pred``: the searcher's predicted plan cost over TorchRec's predicted.
- ``meas``: the same with both plans measured on real kernels (the bench's
  figure), with each plan's measured imbalance beside it.

Predicted = the neural cost model of the bench run; measured = real FBGEMM
timings from that run. Nothing is timed here. Prints a table and writes
``bench/results/balance-bound-<bench name>.md``.

    .venv/bin/python bench/balance_bound.py bench/results/bench-cpu-2c-cpu-bench.csv
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from shardplan.errors import InputError, exit_status
from shardplan.formats import write_text_atomic


def geomean(x: pd.Series) -> float:
    return float(np.exp(np.log(x.astype(float)).mean()))


def bound_table(df: pd.DataFrame, searcher: str) -> pd.DataFrame:
    df = df[df.valid.astype(bool) & df.measured_ms.notna()].set_index(["task", "searcher"])
    rows = []
    for task in df.index.get_level_values("task").unique():
        if (task, "torchrec") not in df.index or (task, searcher) not in df.index:
            continue
        tr, ours = df.loc[(task, "torchrec")], df.loc[(task, searcher)]
        tr_pred_ranks = json.loads(tr.predicted_rank_compute_ms)
        tr_comm = tr.predicted_ms - tr.predicted_compute_ms  # comm of the slowest predicted rank
        rows.append({"task": task, "ranks": int(tr.ranks),
                     "torchrec_imbalance": tr.imbalance, f"{searcher}_imbalance": ours.imbalance,
                     "bound": (np.mean(tr_pred_ranks) + tr_comm) / tr.predicted_ms,
                     "pred": ours.predicted_ms / tr.predicted_ms,
                     "meas": ours.measured_ms / tr.measured_ms})
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", type=Path, help="a `shardplan bench` CSV with torchrec and the searcher")
    ap.add_argument("--searcher", default="neuroshard")
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args()
    df = pd.read_csv(args.csv)
    if "predicted_rank_compute_ms" not in df.columns:
        raise InputError("csv", f"{args.csv} has no per-rank columns (benches before 2026-11-21 lack them)",
                         "re-run the bench")
    table = bound_table(df, args.searcher)
    if table.empty:
        raise InputError("--searcher", f"{args.csv} has no task planned by both torchrec and {args.searcher}",
                         "name a searcher the bench ran")
    means = {c: geomean(table[c]) for c in table.columns if c not in ("task", "ranks")}
    summary = (f"{len(table)} tasks; geometric means: TorchRec measured imbalance "
               f"{means['torchrec_imbalance']:.3f}, {args.searcher} {means[f'{args.searcher}_imbalance']:.3f}; "
               f"balance bound {means['bound']:.3f}, {args.searcher} predicted {means['pred']:.3f}, "
               f"measured {means['meas']:.3f} (all over TorchRec).")
    md = "\n".join([f"# Balance bound of `{args.csv.name}`", "",
                    f"Command: `.venv/bin/python bench/balance_bound.py {shlex.join(sys.argv[1:])}`", "",
                    (__doc__ or "").split("\n\n")[1], "", summary, "",
                    table.to_markdown(index=False, floatfmt=".3f"), ""])
    print(md)
    write_text_atomic(args.out / f"balance-bound-{args.csv.stem}.md", md)


if __name__ == "__main__":
    sys.exit(exit_status(main))
