"""The same shard sets and plans timed on two GPUs: how far one chip's cost model carries to the other.

Both GPU profiles' collections draw their sets from the same seed, so sample k of
``data/profiles/<a>/compute.parquet`` and of ``<b>``'s is the same set at the same batch (checked
row by row; a set a profile's budget drew differently is left out). Prints and writes
``bench/results/gpu-chips-<a>-<b>.md`` with up to four tables, all measured (FBGEMM CUDA kernels, CUDA
events) or predicted by a named committed model:

1. chip ``a``'s fwd and bwd ms over chip ``b``'s on the same sets, by band of ``b``'s fwd+bwd ms;
2. each committed model on each chip's held-out sets (the same sets for both), labels as timed:
   how much is lost pricing one chip with the other's model;
3. given suite runs of both chips (``--suites A.csv B.csv``, the ``bench/gpu_suite.py run`` CSVs),
   every rank of the plans both measured, ``a`` over ``b``; and each committed model on every rank of
   each run named (more than two may be: another lease's): how far a model carries from the machine
   that collected its data to another.

    .venv/bin/python bench/gpu_chips.py --profiles h100 h200 \\
        --suites bench/results/gpu-h100-2026-11-26/gpu-suite-h100-round1.csv \\
                 bench/results/gpu-h200-2026-11-26-s43/gpu-suite-h200-round1.csv
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from shardplan.cost.estimator import load_estimator
from shardplan.cost.profiles import get_profile
from shardplan.cost.split import holdout_mask
from shardplan.cost.train import load_sets, metric_cells, metrics
from shardplan.errors import InputError, exit_status
from shardplan.formats import load_plan, write_text_atomic

from host_jitter import length_bands  # a sibling: bench/ is on sys.path when run


def spread(x: np.ndarray) -> str:
    """Median (10th-90th percentile) of ``x``, as the GPU reports print a distribution."""
    p10, p50, p90 = np.percentile(x, [10, 50, 90])
    return f"{p50:.3f} ({p10:.3f}-{p90:.3f})"


def chips_report(a: str, b: str, suites: list[Path] | None = None, out: Path = Path("bench/results")) -> str:
    data = {}
    for name in (a, b):
        sets, fwd, bwd, df = load_sets(get_profile(name).dir / "compute.parquet", None)
        data[name] = (sets, fwd, bwd, df.reset_index(drop=True))
    key = ["seed", "sample", "batch_size", "shards"]
    ka, kb = (data[n][3][key].assign(row=np.arange(len(data[n][3]))) for n in (a, b))
    both = ka.merge(kb, on=key, suffixes=("_a", "_b"))
    if both.empty:
        raise InputError("--profiles", f"{a} and {b} share no timed set", "name two profiles collected with one seed")
    ia, ib = both.row_a.to_numpy(), both.row_b.to_numpy()
    fa, ba, fb, bb = data[a][1][ia], data[a][2][ia], data[b][1][ib], data[b][2][ib]
    total_b = fb + bb
    lines = [f"# The same sets and plans on `{a}` and `{b}`", "",
             f"Command: `.venv/bin/python bench/gpu_chips.py --profiles {a} {b}"
             + (" --suites " + " ".join(map(str, suites)) if suites else "") + "`", "",
             f"Measured: FBGEMM forward and backward (fused SGD) by CUDA events, each chip's "
             f"`compute.parquet`; {len(both)} sets timed on both. Median (10th-90th percentile) of "
             f"`{a}`'s ms over `{b}`'s, by band of `{b}`'s fwd+bwd ms:", "",
             "| band (ms) | sets | fwd | bwd | fwd+bwd |", "| --- | --- | --- | --- | --- |"]
    for band, rows in length_bands(total_b):
        lines.append(f"| {band} | {int(rows.sum())} | {spread(fa[rows] / fb[rows])} | {spread(ba[rows] / bb[rows])} "
                     f"| {spread((fa + ba)[rows] / total_b[rows])} |")
    held = holdout_mask(both)  # held out by (seed, sample): the same sets on both chips
    lines += ["", f"Each committed model (predicted) on the {int(held.sum())} held-out sets of both chips, against "
              "the labels as timed (no model was trained on them):", "",
              "| model | chip timed | fwd MAPE | fwd Spearman | bwd MAPE | bwd Spearman | fwd+bwd MAPE | "
              "fwd+bwd Spearman |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    estimators = {name: load_estimator(name) for name in (a, b)}  # each profile's committed models
    for model_name, est in estimators.items():
        pf, pb = est.compute.predict([data[model_name][0][i] for i in (ia if model_name == a else ib)[held]],
                               random_level=True)
        for chip, f, bw in ((a, fa, ba), (b, fb, bb)):
            lines.append(f"| `{model_name}` | `{chip}` | {metric_cells(metrics(pf, pb, f[held], bw[held]))} |")
    if suites:
        if len(suites) < 2:
            raise InputError("--suites", f"names {len(suites)} CSV", "name chip A's run, then chip B's")
        runs = [pd.read_csv(p) for p in suites]
        merged = runs[0].merge(runs[1], on=["task", "searcher"], suffixes=("_a", "_b"))
        # a plan counts where both chips ran the same plan: the searchers that planned with a chip's own
        # model on that chip made different plans, told apart by the model the plan records
        merged = merged[merged.plan_cost_model_a == merged.plan_cost_model_b]
        ratios = np.concatenate([np.array(json.loads(x)) / np.array(json.loads(y))
                                 for x, y in zip(merged.rank_measured_ms_a, merged.rank_measured_ms_b)])
        slowest = merged.embedding_ms_a / merged.embedding_ms_b
        lines += ["", f"The GPU suite's plans measured on both chips ({len(merged)} plans, the same plan files; "
                  f"`{suites[0]}` over `{suites[1]}`), emulated-rank loop, compute + modelled comm:", "",
                  "| what | n | median (10th-90th percentile) |", "| --- | --- | --- |",
                  f"| every rank | {len(ratios)} | {spread(ratios)} |",
                  f"| the plan's slowest rank | {len(merged)} | {spread(slowest.to_numpy())} |"]
        lines += ["", "Each committed model (predicted) on every rank each suite run measured (its plans read from "
                  "the `plans/` folder beside the CSV), compute + comm:", "",
                  "| model | run | ranks | median predicted / measured | MAPE | within 15% |",
                  "| --- | --- | --- | --- | --- | --- |"]
        plans = [[load_plan(path.parent / "plans" / f"{row.task}--{row.searcher}.json") for row in run.itertuples()]
                 for path, run in zip(suites, runs)]
        for model_name, est in estimators.items():
            for path, run, run_plans in zip(suites, runs, plans):
                pred = [r.total_ms for plan in run_plans for r in est.estimate(plan).per_rank]
                meas = [ms for row in run.itertuples() for ms in json.loads(row.rank_measured_ms)]
                ratio = np.array(pred) / np.array(meas)
                err = np.abs(ratio - 1)
                lines.append(f"| `{model_name}` | `{path}` | {len(ratio)} | {np.median(ratio):.3f} | "
                             f"{100 * err.mean():.1f}% | {int((err <= 0.15).sum())}/{len(err)} |")
    text = "\n".join(lines) + "\n"
    write_text_atomic(out / f"gpu-chips-{a}-{b}.md", text)
    return text


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profiles", nargs=2, default=["h100", "h200"], metavar=("A", "B"))
    ap.add_argument("--suites", nargs="+", type=Path, metavar="CSV",
                    help="`bench/gpu_suite.py run` CSVs of the same plans, chip A's then chip B's, then any other "
                         "runs to price with both models (another lease's, say)")
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args(argv)
    print(chips_report(*args.profiles, args.suites, args.out))


if __name__ == "__main__":
    sys.exit(exit_status(main))
