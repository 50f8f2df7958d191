"""How a rank's shards add up in one fused op: measured against the model, shard by shard and for one pair.

The cost model sums per-shard encodings and reads the rank's cost off the
sum, so it learns how shards amortise one another in FBGEMM's fused op. This
script checks that on one rank of a searcher's plan of a task (``--searcher``,
by default the planner's): the rank whole, each of its shards alone, and,
with ``--pair A,B``, those two tables alone and together with their rows
scaled by ``--scales`` (so the pair's bytes cross the host's last-level
cache), and with ``--leave-one-out`` the rank less each shard in turn (what
each shard adds to the rank, against what the model says it adds). Every op
is built once and the ops take turns repetition by repetition, so drift hits
them alike; the ratios (together over the sum of alone) are taken within a
repetition, where the machine's level cancels. A rank too large for every
"without" set to be held at once (each holds nearly the whole rank) is left
out in blocks that fit in memory, the rank and its shards alone timed in every
block, and each shard's margin taken against the rank's times of its block.
Measured = real FBGEMM CPU kernel times, raw ms (median over repetitions;
the reference workload's slowdown recorded); predicted = the committed
neural model. Writes ``bench/results/pair-additivity-<name>.md``.

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 taskset -c 1 \\
      .venv/bin/python bench/pair_additivity.py data/tasks/unseen-a/unseen-a-10.json --rank 1 \\
      --pair t00_meta033,t10_meta742 --name unseen-a-10
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
from shardplan.cost.calibration import MEMORY_SHARE, weight_bytes  # the share calibration leaves its neighbours
from shardplan.cost.estimator import load_estimator
from shardplan.cost.kernel import RankOp, time_reference
from shardplan.cost.profiles import available_memory_gb, get_profile, load1, reference_ms
from shardplan.cost.specs import ShardSpec, rank_specs
from shardplan.errors import InputError, exit_status
from shardplan.execute.measure import MEASURE_ID_SEED
from shardplan.formats import load_task
from shardplan.search import DEFAULT_SEARCHER, get_searcher
from provenance import provenance, write_report  # a sibling: bench/ is on sys.path when run


def pair_keys(factor: float, a: ShardSpec, b: ShardSpec) -> tuple[str, str, str]:
    """The set names of the pair scaled by ``factor``: each table alone, and both."""
    return f"x{factor:g}: {a.table}", f"x{factor:g}: {b.table}", f"x{factor:g}: both"


def scaled(spec: ShardSpec, factor: float) -> ShardSpec:
    """``spec`` with its table's rows (and the shard's) scaled by ``factor``."""
    return replace(spec, table_rows=max(1, round(spec.table_rows * factor)), row_offset=0,
                   rows=max(1, round(spec.rows * factor)))


def blocks(resident: list[list[ShardSpec]], extra: dict[str, list[ShardSpec]]) -> list[list[str]]:
    """The ``extra`` sets' names in order, in blocks whose ops fit in memory beside the ``resident`` sets'
    (built once and held throughout); one block when there is room for all (or no way to tell)."""
    have = available_memory_gb()
    if have is None or not extra:
        return [list(extra)]
    budget = MEMORY_SHARE * have * 2**30 - sum(weight_bytes(v) for v in resident)
    out: list[list[str]] = [[]]
    used = 0.0
    for k, v in extra.items():
        need = weight_bytes(v)
        if need > budget:
            raise InputError("task", f"the set {k!r} ({need / 2**30:.1f} GiB) does not fit beside the rank and "
                             f"its shards alone in the {have:.1f} GiB available",
                             "take apart a smaller rank, or leave --leave-one-out out")
        if out[-1] and used + need > budget:
            out.append([])
            used = 0.0
        out[-1].append(k)
        used += need
    return out


def margins(specs: list[ShardSpec], measured: dict[str, np.ndarray], rank_beside: dict[str, np.ndarray],
            predicted: dict[str, float]) -> pd.DataFrame:
    """What each shard adds to its rank: the rank's time less the rank's without it, measured (median over
    repetitions of ``rank_beside["without: T"] - measured["without: T"]``, the rank's times of the same
    repetitions) and predicted, and both as shares of the rank (taken within a repetition, where the host's
    level cancels), beside the shard's time alone as a share. Shares that sum past 1 say the shards slow one
    another; the model's shares show whether it knows."""
    return pd.DataFrame([{
        "shard": s.table, "rows": s.rows, "cols": s.cols, "pooling_factor": s.pooling_factor,
        "measured_ms": float(np.median((rank := rank_beside[k := f"without: {s.table}"]) - measured[k])),
        "predicted_ms": predicted["rank"] - predicted[k],
        "measured share": float(np.median(1.0 - measured[k] / rank)),
        "predicted share": 1.0 - predicted[k] / predicted["rank"],
        "measured alone share": float(np.median(measured[f"alone: {s.table}"] / measured["rank"])),
    } for s in specs])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task", type=Path)
    ap.add_argument("--rank", type=at_least(0), default=0)
    ap.add_argument("--pair", default="", help="two tables of the rank, comma-separated, timed alone and together")
    ap.add_argument("--scales", default="0.1,0.25,0.5,1,2", help="row scalings of the pair")
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--searcher", default=DEFAULT_SEARCHER, help="whose plan's rank to take apart")
    ap.add_argument("--repeats", type=at_least(1), default=7, help="repetitions (all ops take turns)")
    ap.add_argument("--leave-one-out", action="store_true",
                    help="also time the rank without each of its shards: what each adds to the rank, measured and "
                         "predicted")
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args()
    profile = get_profile(args.profile)
    profile.use_threads()
    est = load_estimator(args.profile)
    task = load_task(args.task)
    plan = get_searcher(args.searcher).plan(task, est, seed=0)
    ranks = rank_specs(plan)
    if not 0 <= args.rank < len(ranks):
        raise InputError("--rank", f"must be in 0..{len(ranks) - 1}, got {args.rank}")
    specs = ranks[args.rank]
    sets: dict[str, list[ShardSpec]] = {"rank": specs, **{f"alone: {s.table}": [s] for s in specs}}
    without = {f"without: {s.table}": [x for x in specs if x is not s] for s in specs} if args.leave_one_out else {}
    pair_rows = []
    if args.pair:
        names = args.pair.split(",")
        pair = [next((s for s in specs if s.table == n), None) for n in names]
        if len(pair) != 2 or None in pair:
            raise InputError("--pair", f"must name two tables on rank {args.rank}",
                             f"choose from {sorted(s.table for s in specs)}")
        for f in (float(x) for x in args.scales.split(",")):
            a, b = (scaled(s, f) for s in pair)
            ka, kb, kab = pair_keys(f, a, b)
            sets[ka], sets[kb], sets[kab] = [a], [b], [a, b]
            pair_rows.append((f, a, b))
    everything = {**sets, **without}
    predicted = dict(zip(everything, (fw + bw for fw, bw in est.rank_compute(list(everything.values())))))
    parts = blocks(list(sets.values()), without)
    resident = {k: RankOp(v, task.optimizer, task.dtype, profile.device, MEASURE_ID_SEED) for k, v in sets.items()}
    quiet = reference_ms(profile)
    load_before = load1()
    runs: dict[str, list[float]] = {k: [] for k in everything}
    rank_runs: dict[str, list[float]] = {k: [] for k in without}  # the rank's times beside each "without" set
    refs = []
    for i, part in enumerate(parts):
        ops = {**resident, **{k: RankOp(without[k], task.optimizer, task.dtype, profile.device, MEASURE_ID_SEED)
                              for k in part}}
        block = f", block {i + 1} of {len(parts)}" if len(parts) > 1 else ""
        for _ in tqdm(range(args.repeats), desc=f"pair additivity [{task.name} rank {args.rank}{block}]"):
            refs.append(time_reference(profile.device))
            for k, op in ops.items():
                t = op.run(profile.warmup, profile.repeats)
                runs[k].append(t.fwd_ms + t.bwd_ms)
            for k in part:
                rank_runs[k].append(runs["rank"][-1])
        del ops, op  # free this block's sets (the loop variable holds one) before the next block's are built
    m = {k: np.array(v) for k, v in runs.items()}

    def ratio(together: str, alone: list[str]) -> tuple[float, float]:
        """Together over the sum of alone: measured (median of per-repetition ratios) and predicted."""
        meas = float(np.median(m[together] / sum(m[k] for k in alone)))
        return meas, predicted[together] / sum(predicted[k] for k in alone)

    singles = [f"alone: {s.table}" for s in specs]
    rank_meas, rank_pred = ratio("rank", singles)
    shard_table = pd.DataFrame([{"set": k, "rows": sets[k][0].rows, "cols": sets[k][0].cols,
                                 "pooling_factor": sets[k][0].pooling_factor, "zipf_alpha": sets[k][0].zipf_alpha,
                                 "measured_ms": float(np.median(m[k])), "predicted_ms": predicted[k]}
                                for k in singles] + [{"set": "rank", "measured_ms": float(np.median(m["rank"])),
                                                      "predicted_ms": predicted["rank"]}])
    shard_table["measured / predicted"] = shard_table.measured_ms / shard_table.predicted_ms
    md = [f"# How shards add up: `{task.name}` rank {args.rank} of the `{args.searcher}` plan ({args.name})", "",
          *provenance(load_before, f"; reference slowdown {min(refs) / quiet:.2f}-{max(refs) / quiet:.2f}x."
                      if quiet else "."), "",
          f"Measured: real FBGEMM CPU kernel times, raw ms, median of {args.repeats} repetitions in which every op "
          "takes its turn; predicted: the committed neural model. A ratio is a set's time over the sum of its "
          "shards' times alone (below 1: they amortise one another; above 1: they interfere).", "",
          f"The rank whole over the sum of its {len(specs)} shards alone: measured **{rank_meas:.3f}**, "
          f"predicted {rank_pred:.3f}.", "", shard_table.to_markdown(index=False, floatfmt=".3f"), ""]
    if args.leave_one_out:
        md += ["What each shard adds to the rank (the rank less the rank without it; medians over repetitions; shares "
               "of the rank's time, taken within a repetition):", "",
               margins(specs, m, {k: np.array(v) for k, v in rank_runs.items()}, predicted)
               .to_markdown(index=False, floatfmt=".3f"), ""]
    if pair_rows:
        rows = []
        for f, a, b in pair_rows:
            ka, kb, kab = pair_keys(f, a, b)
            pm, pp = ratio(kab, [ka, kb])
            rows.append({"row scale": f, "MiB of both": (a.rows * a.cols + b.rows * b.cols) * 4 / 2**20,
                         "measured alone a / b": f"{np.median(m[ka]):.2f} / {np.median(m[kb]):.2f}",
                         "measured both": float(np.median(m[kab])), "predicted both": predicted[kab],
                         "both / sum alone, measured": pm, "predicted": pp})
        a, b = pair
        md += [f"The pair `{a.table}` and `{b.table}` (rows scaled; {task.dtype}, {a.cols} and {b.cols} columns):",
               "",
               pd.DataFrame(rows).to_markdown(index=False, floatfmt=".3f"), ""]
    write_report(args.out, f"pair-additivity-{args.name}", md)


if __name__ == "__main__":
    sys.exit(exit_status(main))
