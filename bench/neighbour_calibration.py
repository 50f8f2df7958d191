"""Does neighbour calibration give back the quiet host's times on a disturbed host? Checked on ranks whose
quiet times are known.

Targets are stored plan ranks of the profile (``compute-ranks.parquet``,
timed under the quiet gate), a seeded choice spread evenly over log label
ms. Each is timed now with :func:`shardplan.cost.calibration.calibrated_timing`,
its neighbours drawn from other tasks only, and both of its figures are
compared with its label: divided by the reference's slowdown (what plan
measurements do) and divided by its neighbours' factor. With ``--features``
given more than once, each target is calibrated by each choice of neighbours
in turn, so the choices are compared on the same targets in the same minutes;
``--visits`` given more than once does the same for how long each is timed.
``--label-ms LO HI`` keeps targets of those quiet-host times (short ranks, say).
Prints a table and
writes ``bench/results/neighbour-calibration-<profile>[-NAME].{md,csv}``.
Measured: real FBGEMM CPU kernel times; no model is involved.

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 taskset -c 1 \\
        .venv/bin/python bench/neighbour_calibration.py --targets 24
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from shardplan.argtypes import at_least
from shardplan.cost.calibration import (FEATURES, NEIGHBOURS, PASSES, POINT_NAMES, VISITS, calibrated_timing,
                                        labelled_pool)
from shardplan.cost.profiles import get_profile, load1
from shardplan.errors import InputError, exit_status
from shardplan.formats import write_text_atomic
from provenance import provenance  # a sibling: bench/ is on sys.path when run

BANDS = 8  # equal bands of log label ms; targets are drawn evenly from them


def pick_targets(n: int, seed: int, log_ms: np.ndarray, eligible: np.ndarray | None = None) -> list[int]:
    """``n`` target indices spread evenly over bands of ``log_ms``, among the ``eligible`` ones (all by default)."""
    rng = np.random.default_rng(seed)
    keep = np.flatnonzero(eligible) if eligible is not None else np.arange(len(log_ms))
    sub = log_ms[keep]
    band = np.minimum(((sub - sub.min()) / max(np.ptp(sub), 1e-9) * BANDS).astype(int), BANDS - 1)
    per = max(1, n // BANDS)
    return [int(keep[i]) for b in range(BANDS) if (members := np.flatnonzero(band == b)).size
            for i in rng.choice(members, min(per, members.size), replace=False)]


def point_names(text: str) -> tuple[str, ...]:
    """``--features``: names of :data:`POINT_NAMES`, or a count of them from the first."""
    names = POINT_NAMES[:int(text)] if text.isdigit() else tuple(t.strip() for t in text.split(",") if t.strip())
    if not names or any(n not in POINT_NAMES for n in names):
        raise argparse.ArgumentTypeError(f"{text!r}: give one or more of {', '.join(POINT_NAMES)}")
    return names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--targets", type=at_least(1), default=24)
    ap.add_argument("--k", type=at_least(1), default=NEIGHBOURS)
    ap.add_argument("--visits", type=at_least(1), action="append",
                    help=f"visits of the rank and its neighbours a pass (default {VISITS}); give it again to "
                         "compare, each target calibrated with each in turn")
    ap.add_argument("--passes", type=at_least(1), default=PASSES)
    ap.add_argument("--features", type=point_names, action="append",
                    help=f"what neighbours are chosen by, comma-separated among {', '.join(POINT_NAMES)} "
                         f"(default {','.join(FEATURES)}); a count n means the first n (as in older results); "
                         "give it again to compare choices, each target calibrated by each in turn")
    ap.add_argument("--min-gb", type=at_least(0, float), default=0.0,
                    help="only stored ranks holding at least this many GB of weights (heavy ranks)")
    ap.add_argument("--min-touched-mb", type=at_least(0, float), default=0.0,
                    help="only stored ranks whose ids touch at least this many MB of rows a batch "
                         "(cache-heavy ranks, whose slowdown the reference misses)")
    ap.add_argument("--label-ms", type=at_least(0, float), nargs=2, metavar=("LO", "HI"),
                    help="only stored ranks whose label is in [LO, HI) ms (the pool holds 1-50 ms)")
    ap.add_argument("--seed", type=at_least(0), default=0)
    ap.add_argument("--name", help="results file stem suffix")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    profile = get_profile(args.profile)
    pool = labelled_pool(profile)
    if not pool.ranks:
        raise InputError("--profile", f"profile {args.profile!r} has no quiet-gated stored ranks",
                         "collect them with `shardplan collect ranks` first")
    choices = args.features or [FEATURES]
    visit_choices = args.visits or [VISITS]
    settings = [(f, v) for f in choices for v in visit_choices]
    # Both read off the pool's points (calibration.rank_point), not recomputed: touched a ms times ms.
    col = {n: pool.features[:, POINT_NAMES.index(n)] for n in POINT_NAMES}
    held_gb = np.exp(col["held"]) / 1e9
    touched_mb = np.exp(col["touched_per_ms"] + col["ms"]) / 1e6
    label_ms = np.exp(col["ms"])
    lo, hi = args.label_ms or (0.0, np.inf)
    eligible = ((held_gb >= args.min_gb) & (touched_mb >= args.min_touched_mb)
                & (label_ms >= lo) & (label_ms < hi))
    if not eligible.any():
        raise InputError("--min-gb, --min-touched-mb, --label-ms",
                         f"no stored rank holds {args.min_gb} GB and touches {args.min_touched_mb} MB a batch"
                         + (f", labelled {lo:g}-{hi:g} ms" if args.label_ms else "")
                         + f" (the most held is {held_gb.max():.2f} GB, touched "
                         f"{touched_mb.max():.1f} MB; labels {label_ms.min():.2f}-{label_ms.max():.2f} ms)",
                         "widen them")
    load_before = load1()
    rows = []
    for i in tqdm(pick_targets(args.targets, args.seed, pool.features[:, 0], eligible), desc="targets"):
        r = pool.ranks[i]
        for features, visits in settings:  # in turn, so every choice meets the host in the same state
            c = calibrated_timing(list(r.specs), r.optimizer, r.dtype, r.id_seed, profile, args.k, visits,
                                  args.passes, exclude_task=pool.tasks[i], features=features)
            rows.append({"target": i, "task": pool.tasks[i], "label_ms": r.label_ms, "features": ",".join(features),
                         "visits": visits, "setting": f"by {','.join(features)}, {visits} visits",
                         "held_gb": held_gb[i], "touched_mb": touched_mb[i],
                         "raw_ms": c.raw_fwd_ms + c.raw_bwd_ms, "reference_slowdown": c.reference_slowdown,
                         "neighbour_factor": c.factor, "passes": c.passes,
                         "by_reference": c.reference_divided_ms / r.label_ms - 1,
                         "by_neighbours": (c.fwd_ms + c.bwd_ms) / r.label_ms - 1})
    df = pd.DataFrame(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"neighbour-calibration-{args.profile}" + (f"-{args.name}" if args.name else "")
    df.to_csv(out / f"{stem}.csv", index=False)

    def summary(err: pd.Series) -> str:
        a = err.abs()
        return (f"{100 * a.mean():.1f}% | {100 * a.median():.1f}% | {100 * (a <= 0.10).mean():.0f}% | "
                f"{100 * (a <= 0.15).mean():.0f}% | {100 * err.mean():+.1f}%")

    df["band"] = pd.cut(df.label_ms, [0, 3, 8, 20, np.inf], labels=["1-3 ms", "3-8 ms", "8-20 ms", "20-50 ms"])
    targets = df.drop_duplicates("target")
    window = f" labelled {lo:g}-{hi:g} ms" if args.label_ms else ""
    md = [f"# Neighbour calibration against known labels, profile `{args.profile}`", "",
          *provenance(load_before, f". {len(targets)} stored ranks"
          + (f" holding {args.min_gb} GB or more" if args.min_gb else "")
          + (f" touching {args.min_touched_mb} MB or more a batch" if args.min_touched_mb else "") + window
          + " re-timed now, each beside its "
          f"{args.k} nearest labelled ranks of other tasks (by {' and, in turn, by '.join(map(', '.join, choices))}; "
          f"{' and, in turn, '.join(map(str, visit_choices))} visits, "
          f"up to {args.passes} passes); the "
          f"reference read {df.reference_slowdown.median():.2f}x quiet (median; "
          f"{df.reference_slowdown.min():.2f}-{df.reference_slowdown.max():.2f}x). Error = figure over the "
          "rank's quiet-host label, minus 1. Measured on real FBGEMM CPU kernels; no model involved."), "",
          "| divided by | mean abs error | median | within 10% | within 15% | mean error |",
          "| --- | --- | --- | --- | --- | --- |",
          f"| the reference's slowdown | {summary(df.by_reference)} |",
          *(f"| the neighbours' factor ({f}) | {summary(g.by_neighbours)} |"
            for f, g in df.groupby("setting", sort=False)), "",
          "| label band | neighbours | targets | by reference: mean abs | by neighbours: mean abs |",
          "| --- | --- | --- | --- | --- |"]
    md += [f"| {b} | {f} | {len(g)} | {100 * g.by_reference.abs().mean():.1f}% | "
           f"{100 * g.by_neighbours.abs().mean():.1f}% |"
           for (b, f), g in df.groupby(["band", "setting"], observed=True)]
    write_text_atomic(out / f"{stem}.md", "\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    sys.exit(exit_status(main))
