"""Stored labels that failed the quiet gate: how many, how far off the model they lie, and whose neighbours they were.

``shardplan collect`` times a sample between two readings of the reference
workload and retries it while the machine is :func:`~shardplan.cost.kernel.disturbed`;
after its last retry it keeps the least disturbed timing. Such a label leans
on a divisor the reference over-states (it slows more than the kernels do:
``shardplan.cost.fitness``). Since 2026-11-29 the calibration pool and the
fitness probe take only labels that passed the gate
(:func:`shardplan.cost.fitness.labelled_ranks`); this script shows, per
profile, what that leaves out:

- the stored plan ranks (``compute-ranks.parquet``) and random sets
  (``compute.parquet``) taken under the gate that did not pass it, by how slow
  the reference read around them;
- the committed model's median error on each band against the passed ones
  (a label that over-divides lies under the model);
- with ``--suites``, which of TorchRec's ranks of those suites had such a label
  among the neighbours calibration picks for them at their pooled calibrated
  consensus (the committed ``--calibrate`` runs), before the gate;
- with ``--write-passed DIR``, the first profile's data folder without those rows
  (``compute.parquet`` and ``compute-ranks.parquet`` filtered, every other file
  linked), for a candidate trained on passed labels only (session 66's
  ``candidates/passed-only``).

Measured: the stored labels (real FBGEMM CPU kernel times, as trained);
predicted: each profile's committed neural model. Nothing is timed.

    .venv/bin/python bench/gate_failures.py --profiles cpu-2c-nested cpu-2c-nested-rowwise-adagrad cpu-2c cpu-2c-xeon \\
        --suites data/tasks/unseen-a data/tasks/unseen-b data/tasks/unseen-c data/tasks/unseen-d --name s66
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from shardplan.cost.calibration import NEIGHBOURS, labelled_pool, nearest
from shardplan.cost.estimator import load_estimator
from shardplan.cost.fitness import passed_quiet_gate, taken_under_quiet_gate
from shardplan.cost.kernel import QUIET_TOLERANCE
from shardplan.cost.labels import label_slowdowns
from shardplan.cost.profiles import Profile, get_profile, load1, reference_ms
from shardplan.cost.specs import ShardSpec, specs_from_json
from shardplan.errors import InputError, exit_status
from plan_accuracy_runs import predicted_ms  # siblings: bench/ is on sys.path when run
from provenance import provenance, write_report
from unseen_score import suite_consensus

BANDS = ("passed", "failed, reference up to 1.35x quiet", "failed, 1.35-1.7x", "failed, over 1.7x")


def gate_band(df: pd.DataFrame, quiet: float) -> np.ndarray:
    """Each row's band of :data:`BANDS`: passed the gate, or failed it with the reference read this slow
    (the slower of its two readings; a row that failed only by a burst between them reads low)."""
    failed = ~passed_quiet_gate(df, quiet)
    slow = np.maximum(df.ref_before_ms, df.ref_after_ms).to_numpy() / quiet
    return np.where(~failed, BANDS[0], np.where(slow <= 1.35, BANDS[1], np.where(slow <= 1.7, BANDS[2], BANDS[3])))


def band_table(profile_name: str) -> list[dict[str, object]]:
    """Per file and band: rows, share, the model's median signed and absolute error on their labels."""
    profile = get_profile(profile_name)
    quiet = reference_ms(profile)
    est = load_estimator(profile_name)
    out = []
    for file, source in (("compute-ranks.parquet", "plan-rank"), ("compute.parquet", None)):
        path = profile.dir / file
        if not path.exists() or not quiet:
            continue
        df = pd.read_parquet(path)
        df["label"] = (df.fwd_ms + df.bwd_ms) / label_slowdowns(df, quiet, profile.slowdown_window_s)
        df = df[df.source == source] if source else df
        df = df[taken_under_quiet_gate(df)]
        df = df.assign(band=gate_band(df, quiet))
        pred = np.array([f + b for f, b in est.rank_compute([specs_from_json(s) for s in df.shards])])
        df["err"] = pred / df.label.to_numpy() - 1
        for name in BANDS:
            g = df[df.band == name]
            out.append({"profile": profile_name, "file": file, "labels": name, "rows": len(g),
                        "share": f"{100 * len(g) / max(len(df), 1):.1f}%",
                        "model's median error": f"{100 * g.err.median():+.1f}%" if len(g) else "",
                        "median abs error": f"{100 * g.err.abs().median():.1f}%" if len(g) else "",
                        "timed (UTC)": (f"{g.date.min()[:16]} - {g.date.max()[:16]}"
                                        if len(g) and name != "passed" and "date" in g else "")})
    return out


def write_passed(profile_name: str, out: Path) -> list[str]:
    """``out``: the profile's data folder with the random sets and plan ranks taken under the quiet gate that
    failed it left out, every other file linked; one line per filtered file."""
    profile = get_profile(profile_name)
    quiet = reference_ms(profile)
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for f in sorted(profile.dir.iterdir()):
        if f.name.startswith("compute-model"):
            continue  # the candidate's own model and report go elsewhere
        if f.name not in ("compute.parquet", "compute-ranks.parquet"):
            (out / f.name).unlink(missing_ok=True)
            (out / f.name).symlink_to(f.resolve())
            continue
        df = pd.read_parquet(f)
        failed = ~passed_quiet_gate(df, quiet) & taken_under_quiet_gate(df)
        df[~failed].to_parquet(out / f.name)
        lines.append(f"`{f.name}`: {len(df)} rows, {int(failed.sum())} left out")
    return lines


class OldNeighbours:
    """The calibration pool as it was before the gate (labels that failed it kept), and which of a rank's
    neighbours picked from it failed."""

    def __init__(self, profile: Profile) -> None:
        self.pool = labelled_pool(profile, passed_only=False)
        self.passed = set(labelled_pool(profile).ranks)  # a stored rank is its shards, ids and label

    def failed(self, quiet_ms: float, specs: list[ShardSpec]) -> list[int]:
        """Indices into :attr:`pool` of the neighbours of ``specs`` (at that quiet-host time) that failed the gate."""
        return [i for i in nearest(self.pool, quiet_ms, specs) if self.pool.ranks[i] not in self.passed]


def neighbour_table(profile_name: str, suites: list[Path]) -> pd.DataFrame:
    """TorchRec's ranks of ``suites`` whose neighbours, picked from the pool before the gate at the rank's pooled
    calibrated consensus, include labels that failed it; with the model's error on that consensus."""
    est = load_estimator(profile_name)
    old = OldNeighbours(get_profile(profile_name))
    rows = []
    for suite in suites:
        ranks, cons, runs = suite_consensus(suite, profile_name, "torchrec",
                                            "plan-accuracy-{profile}-{suite}-calibrated-*.csv", est)
        pred = predicted_ms(est, ranks)
        for key, specs in ranks.items():
            cal = float(cons.calibrated_ms[key])
            failed = [old.pool.tasks[i] for i in old.failed(cal, specs)]
            if failed:
                rows.append({"task": key[0], "rank": key[1], "runs": runs, "calibrated_ms": round(cal, 2),
                             "predicted_ms": round(pred[key], 2), "error": f"{100 * (pred[key] / cal - 1):+.1f}%",
                             "neighbours that failed the gate": f"{len(failed)} of {NEIGHBOURS}",
                             "their tasks": ", ".join(failed)})
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", nargs="+", default=["cpu-2c-nested"])
    ap.add_argument("--suites", type=Path, nargs="*", default=[],
                    help="also list the ranks of these suites whose neighbours had such labels (first profile)")
    ap.add_argument("--write-passed", type=Path, metavar="DIR",
                    help="also write the first profile's data folder without the rows that failed the gate to DIR")
    ap.add_argument("--name", help="results file stem suffix")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    for s in args.suites:
        if not s.is_dir():
            raise InputError("--suites", f"{s} is not a folder of task files", "name folders under data/tasks/")
    load_before = load1()
    table = pd.DataFrame([row for p in args.profiles for row in band_table(p)])
    md = [f"# Stored labels that failed the quiet gate: {', '.join(args.profiles)}", "",
          *provenance(load_before, ". Labels: stored real FBGEMM CPU kernel times as trained; the model: each "
                      "profile's committed neural one. Rows taken under the quiet gate (the collector's "
                      f"{QUIET_TOLERANCE:g}x) that were still disturbed after its last retry, by how slow the "
                      "reference read around them. Nothing timed."), "",
          table.to_markdown(index=False), ""]
    if args.suites:
        near = neighbour_table(args.profiles[0], args.suites)
        md += [f"TorchRec's ranks of {', '.join(s.name for s in args.suites)} on `{args.profiles[0]}` whose six "
               "neighbours, picked at their pooled calibrated consensus from the pool as it was before the gate, "
               f"include such labels ({len(near)} ranks):", "",
               near.to_markdown(index=False) if len(near) else "(none)", ""]
    if args.write_passed:
        md += [f"Written to `{args.write_passed}`: the data of `{args.profiles[0]}` without them:", "",
               *(f"- {line}" for line in write_passed(args.profiles[0], args.write_passed)), ""]
    write_report(Path(args.out), "gate-failures" + (f"-{args.name}" if args.name else ""), md, table)


if __name__ == "__main__":
    sys.exit(exit_status(main))
