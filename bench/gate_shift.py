"""What the quiet gate's fix would move on the unseen bar: each rank's shift, timed beside both neighbour sets.

The unseen bar's runs (``plan_accuracy.py --calibrate`` before 2026-11-29) calibrated against a pool
that still held labels that failed the quiet gate (``bench/gate_failures.py``). ``bench/rank_drift.py
--neighbours 6 --ungated-too`` times a rank beside the neighbours the gated pool gives and those the old
pool gives, in the same turns; their ratio (gated over old calibrated ms) is the shift the fix puts on
that rank whatever the host's state. This script reads those reports, moves each measured rank's
pooled consensus (old pool) by its shift, and counts the ranks the committed model then prices within
15%, beside the count as the runs stand. Ranks whose old neighbours held a failed label but that were
not timed so are listed with their error as it stands. A second estimate times nothing: each such rank's
consensus moved by its failed old neighbours' bias alone, each read as the model's ratio over its label.

It is an estimate, not the bar: the bar needs the runs taken again with the gated pool on a fit host.
Measured: the rank-drift reports' real FBGEMM CPU kernel times and the runs' pooled consensus;
predicted: the committed neural model.

    .venv/bin/python bench/gate_shift.py --profile cpu-2c-nested \\
        --drift bench/results/rank-drift-gate-*-s66.md --name s66
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from shardplan.cost.calibration import NEIGHBOURS
from shardplan.cost.estimator import load_estimator
from shardplan.cost.fitness import StoredRank
from shardplan.cost.profiles import get_profile, load1
from shardplan.errors import InputError, exit_status
from gate_failures import OldNeighbours  # siblings: bench/ is on sys.path when run
from plan_accuracy_runs import predicted_ms
from pooled import TOLERANCE
from provenance import provenance, write_report
from unseen_score import SUITES, suite_consensus

_TASK = re.compile(r"^# How far the timing of \S+ ranks [\d,]+ of `([^`]+)` drifts")
_ROW = re.compile(r"^\| (\d+) \| [\d.]+ \| ([\d.]+) \|")
SECTIONS = {"gated": "Against each rank's {k} calibration neighbours",
            "old": "Against each rank's {k} neighbours as chosen before"}


def drift_shifts(path: Path, k: int = 6) -> dict[tuple[str, int], tuple[float, float]]:
    """(task, rank) -> (gated, old) median calibrated ms, read off one ``rank_drift.py --ungated-too`` report."""
    lines = path.read_text().splitlines()
    task = next((m.group(1) for m in map(_TASK.match, lines) if m), None)
    found: dict[str, dict[int, float]] = {}
    section = None
    for line in lines:
        section = next((s for s, head in SECTIONS.items() if line.startswith(head.format(k=k))), section)
        if line.startswith("Every reading"):
            break
        m = _ROW.match(line)
        if section and m:
            found.setdefault(section, {})[int(m.group(1))] = float(m.group(2))
    if task is None or set(found) != set(SECTIONS):
        raise InputError("--drift", f"{path} is not a rank_drift.py report with --neighbours {k} --ungated-too",
                         "give the .md files that runs with --ungated-too wrote")
    return {(task, r): (found["gated"][r], found["old"][r]) for r in found["gated"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True)
    ap.add_argument("--drift", type=Path, nargs="+", required=True, help="rank_drift.py --ungated-too reports")
    ap.add_argument("--suites", type=Path, nargs="+", default=[Path(s) for s in SUITES])
    ap.add_argument("--name", help="results file stem suffix")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    load_before = load1()
    shifts = {key: v for p in args.drift for key, v in drift_shifts(p).items()}
    profile = get_profile(args.profile)
    est = load_estimator(args.profile)
    old_pool = OldNeighbours(profile)

    def model_ms(r: StoredRank) -> float:
        (f, b), = est.rank_compute([list(r.specs)])
        return f + b

    rows = []
    for suite in args.suites:
        ranks, cons, _ = suite_consensus(suite, args.profile, "torchrec",
                                         "plan-accuracy-{profile}-{suite}-calibrated-*.csv", est)
        pred = predicted_ms(est, ranks)
        for key, specs in ranks.items():
            cal = float(cons.calibrated_ms[key])
            failed = [old_pool.pool.ranks[i] for i in old_pool.failed(cal, specs)]
            gated, old = shifts.get(key, (float("nan"), float("nan")))
            moved = cal * gated / old if key in shifts else cal
            # the shift if a failed label's only fault were its own bias, read as the model's ratio over it (the
            # model is within 3% of passed labels, median); a passed neighbour counts 1 in either set
            gauged = cal * float(np.exp(sum(np.log(model_ms(r) / r.label_ms) for r in failed) / NEIGHBOURS))
            rows.append({"task": key[0], "rank": key[1], "predicted_ms": pred[key], "consensus_ms": cal,
                         "failed_neighbours": len(failed), "gated_ms": gated, "old_ms": old, "shift": gated / old,
                         "moved_ms": moved, "error_now": pred[key] / cal - 1, "error_moved": pred[key] / moved - 1,
                         "gauged_ms": gauged, "error_gauged": pred[key] / gauged - 1})
    df = pd.DataFrame(rows)
    within = lambda col: int((df[col].abs() <= TOLERANCE).sum())  # noqa: E731
    timed = df[df.gated_ms.notna()]
    untimed = df[df.gated_ms.isna() & (df.failed_neighbours > 0)]
    pct = lambda s: s.map(lambda x: f"{100 * x:+.1f}%")  # noqa: E731
    touched = df[(df.failed_neighbours > 0) | df.gated_ms.notna()]
    show = touched.assign(shift=touched["shift"].round(3), error_now=pct(touched.error_now),
                          error_moved=pct(touched.error_moved), error_gauged=pct(touched.error_gauged)).round(2)
    md = [f"# The quiet gate's fix on the unseen bar, estimated: `{args.profile}`", "",
          *provenance(load_before, f". {len(args.drift)} rank-drift reports (`--ungated-too`: each rank timed "
                      "beside both neighbour sets in the same turns; real FBGEMM CPU kernel times), applied to the "
                      "bar's pooled calibrated consensus (the committed runs, old pool). Predicted: the committed "
                      f"neural `{args.profile}` model."), "",
          f"Within {TOLERANCE:.0%}: **{within('error_now')} of {len(df)}** on the runs as they stand, "
          f"**{within('error_moved')} of {len(df)}** with the {len(timed)} timed ranks moved by their shift. "
          f"{len(untimed)} more ranks had a failed label among their old neighbours and were not timed "
          f"(error as it stands: {untimed.error_now.abs().max() * 100 if len(untimed) else 0:.1f}% at most).", "",
          f"A second estimate, timing nothing: every rank's consensus moved by its failed old neighbours' bias "
          f"alone, each read as the model's ratio over its label (`gauged`; the model prices passed labels within "
          f"a median 3%): **{within('error_gauged')} of {len(df)}**. It leans on the model for those labels only, "
          "and leaves out what the swapped-in neighbours add.", "",
          f"Every rank timed so or with a failed old neighbour ({len(touched)}):", "",
          show[["task", "rank", "predicted_ms", "consensus_ms", "failed_neighbours", "gated_ms", "old_ms", "shift",
                "moved_ms", "error_now", "error_moved", "gauged_ms", "error_gauged"]].to_markdown(index=False), ""]
    write_report(Path(args.out), f"gate-shift-{args.profile}" + (f"-{args.name}" if args.name else ""), md, df)


if __name__ == "__main__":
    sys.exit(exit_status(main))
