"""Does a fit probe mean the rank measured beside it is measured right? The bar's instrument, bracketed.

The gated runs of issue 2's last bar (``plan_accuracy.py --fit-streak 2 --fit-after``) hold a whole task,
three or four minutes, to a guest fit by the fitness probe (:mod:`shardplan.cost.fitness`) before and
after it. The ``cpu-2c-nested`` guest passes that probe in blips of one probe, 30 s apart, so a task
seldom starts and is seldom kept (sessions 68-71: 3 tasks kept in about a thousand probes). A rank is the
instrument's own unit, though: one neighbour-calibrated timing of one rank
(:func:`shardplan.cost.calibration.calibrated_timing`, as :func:`measure_plan_calibrated` takes each
rank's round) takes seconds.

This script measures named plan ranks that way over and over, each measurement between two probes (the
probe after one is the probe before the next), and writes every one down with both probes. No
measurement is kept or dropped while it runs: the gate is applied afterwards, on the probes alone, so
one run shows, for measurements whose probes were fit and for those whose probes were not, how far each
lies from the ranks' consensus over the bar's fit runs. If a measurement between two fit probes lies
from that consensus as a fit run does (on ranks of 10 ms or more, a median 1.5-2.4%) and the others as
unfit runs do (4-5%), a gate on single ranks can take the bar's measurements on this guest; if the two
lie alike, the probe does not tell a fit moment from an unfit one at this scale (so it was on 2026-12-01:
a pass had no memory 8 s on, and the measurements did not follow the probes; docs/cost-model.md, session 72).

Targets are plan ranks, ``TASK_FILE:RANK,RANK``: TorchRec plans each task as the bar's runs did, and
the committed model prices each rank. A run is resumable: the measurements go to
``bench/results/probe-bracket-<name>.measurements.csv`` as they are taken, and the same command goes on
with the next target in turn. The report (``probe-bracket-<name>.{md,csv}``) is written at the end of
each start, and alone with ``--report``. Measured: real FBGEMM CPU kernel times, neighbour-calibrated;
predicted: the committed neural model of ``--profile``; consensus: the bar's own, per rank the median
(log space) over the committed runs of its suite that ``--runs-glob`` names and that measured today's plans
(:func:`unseen_score.suite_consensus`). ``--apart`` reports some targets in
a group of their own: the bar's misses, whose consensus the old pool's failed labels may have moved
(``bench/results/gate-shift-cpu-2c-nested-s66.md``), beside controls whose neighbours all passed.

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 taskset -c 1 .venv/bin/python \\
      bench/probe_bracket.py --profile cpu-2c-nested --minutes 90 --name s72 \\
      --targets data/tasks/unseen-d/unseen-d-14.json:1,2,3 data/tasks/unseen-b/unseen-b-02.json:2
"""
from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from shardplan.argtypes import at_least
from shardplan.cost import fitness
from shardplan.cost.calibration import calibrated_timing
from shardplan.cost.estimator import load_estimator
from shardplan.cost.fitness import Fitness
from shardplan.cost.profiles import get_profile, load1
from shardplan.cost.specs import ShardSpec, rank_specs
from shardplan.errors import InputError, exit_status
from shardplan.execute.measure import MEASURE_ID_SEED
from shardplan.formats import load_task, write_text_atomic
from shardplan.search import get_searcher
from plan_accuracy import rank_signature  # siblings: bench/ is on sys.path when run
from pooled import TOLERANCE
from provenance import provenance, write_report
from unseen_score import suite_consensus

BEFORE, AFTER = "before_", "after_"  # the probes' column prefixes (Fitness.columns)
SHORT_MS = 10.0  # under it the instrument has a floor of its own (README, "The cpu-2c-nested unseen bar")


@dataclass(frozen=True)
class Target:
    """One plan rank to measure: its suite (the task file's folder) and task, its shards and what the committed
    model prices it at."""

    suite: Path
    task: str
    rank: int
    specs: list[ShardSpec]
    optimizer: str
    dtype: str
    signature: str
    predicted_ms: float


def parse_target(text: str) -> tuple[Path, list[int]]:
    """``TASK_FILE:RANK,RANK`` (argparse type)."""
    path, _, ranks = text.rpartition(":")
    try:
        numbers = [int(r) for r in ranks.split(",")]
    except ValueError:
        numbers = []
    if not path or not numbers or min(numbers) < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not TASK_FILE:RANK,RANK (e.g. "
                                         "data/tasks/unseen-d/unseen-d-14.json:1,2)")
    return Path(path), numbers


def plan_targets(given: list[tuple[Path, list[int]]], profile: str, searcher: str) -> list[Target]:
    """Each named rank of ``searcher``'s plan of its task, priced by the profile's committed model."""
    est = load_estimator(profile)
    plan_with = get_searcher(searcher)
    targets = []
    for path, ranks in given:
        if not path.is_file():
            raise InputError("--targets", f"no task file at {path}", "name task files, e.g. data/tasks/unseen-d/…")
        task = load_task(path)
        plan = plan_with.plan(task, est)
        specs = rank_specs(plan)
        for r in ranks:
            if r >= len(specs) or not specs[r]:
                raise InputError("--targets", f"{task.name} rank {r} holds no shards in {searcher}'s plan",
                                 f"name ranks of {[i for i, s in enumerate(specs) if s]}")
            (fwd, bwd), = est.rank_compute([specs[r]])
            targets.append(Target(path.parent, task.name, r, specs[r], task.optimizer, task.dtype,
                                  rank_signature(specs[r]), fwd + bwd))
    return targets


def consensus(targets: list[Target], profile: str, searcher: str, runs_glob: str, results: Path) -> pd.DataFrame:
    """Per target, the bar's calibrated consensus over its suite's committed runs (``runs_glob`` under
    ``results``; :func:`unseen_score.suite_consensus`: runs of today's plans by one instrument, the median per
    rank in log space), the suite's name and how many runs it pools."""
    est = load_estimator(profile)
    frames = []
    for suite in sorted({t.suite for t in targets}):
        _, cons, n_runs = suite_consensus(suite, profile, searcher, runs_glob, est, results)
        frames.append(cons.calibrated_ms.rename("consensus_ms").rename_axis(["task", "rank"]).reset_index()
                      .assign(suite=suite.name, consensus_runs=n_runs))
    keys = pd.DataFrame({"task": [t.task for t in targets], "rank": [t.rank for t in targets]})
    return keys.merge(pd.concat(frames, ignore_index=True), on=["task", "rank"], how="left")


def measure(targets: list[Target], profile_name: str, minutes: float, out: Path) -> None:
    """Measure the targets in turn, each between two probes, for ``minutes``; every row is written at once
    (with its after-probe), so a run stopped at any point keeps what it took."""
    profile = get_profile(profile_name)
    rows = pd.read_csv(out).to_dict("records") if out.exists() else []
    deadline = time.monotonic() + 60 * minutes
    before = fitness.probe(profile)
    if before is None:
        raise InputError("--profile", f"{profile_name} has no stored plan ranks to probe with",
                         "name a profile with compute-ranks.parquet")
    with tqdm(desc="bracketed measurements", unit="rank", initial=len(rows)) as bar:
        while time.monotonic() < deadline:
            t = targets[len(rows) % len(targets)]  # the next in turn, across starts too
            at = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
            c = calibrated_timing(t.specs, t.optimizer, t.dtype, MEASURE_ID_SEED, profile)
            after = fitness.probe(profile)
            rows.append({"at": at, "task": t.task, "rank": t.rank, "predicted_ms": t.predicted_ms,
                         "cal_ms": c.fwd_ms + c.bwd_ms, "cal_factor": c.factor, "passes": c.passes,
                         "cal_reference_slowdown": c.reference_slowdown,
                         **before.columns(BEFORE), **after.columns(AFTER)})
            write_text_atomic(out, pd.DataFrame(rows).to_csv(index=False))
            bar.update()
            tqdm.write(f"{at[11:]} {t.task} r{t.rank}: {rows[-1]['cal_ms']:.2f} ms calibrated "
                       f"(predicted {t.predicted_ms:.2f}); probes {'fit' if before.fit else 'unfit'}/"
                       f"{'fit' if after.fit else 'unfit'}")
            before = after


def probe_fit(df: pd.DataFrame, prefix: str) -> np.ndarray:
    """Whether each measurement's probe of ``prefix`` (:data:`BEFORE`, :data:`AFTER`) found the host fit."""
    return np.array([Fitness.from_columns(r, prefix).fit for r in df.itertuples()], dtype=bool)


def starts(df: pd.DataFrame) -> int:
    """How many starts took these measurements. A start probes once before its first measurement and then once
    after each, the after-probe serving as the next one's before-probe; so a row whose before-probe is not the
    previous row's after-probe opens a start of its own (the first row always does)."""
    if not len(df):
        return 0
    before = df[list(Fitness.column_names(BEFORE))].to_numpy(float)
    after = df[list(Fitness.column_names(AFTER))].to_numpy(float)
    chained = np.isclose(before[1:], after[:-1], rtol=1e-12, atol=0.0, equal_nan=True).all(axis=1)
    return 1 + int((~chained).sum())


def bracket(fit_before: np.ndarray, fit_after: np.ndarray) -> np.ndarray:
    """Each measurement's probes: ``both fit``, ``one fit`` or ``neither``."""
    return np.where(fit_before & fit_after, "both fit", np.where(fit_before ^ fit_after, "one fit", "neither"))


def report(df: pd.DataFrame, targets: list[Target], cons: pd.DataFrame,
           apart: frozenset[tuple[str, int]] = frozenset()) -> tuple[list[str], pd.DataFrame]:
    """The measurements against the targets' consensus (:func:`consensus`), by their probes and by rank length
    (the ranks ``apart``, as (task, rank), in a group of their own: say, those whose consensus is in question);
    per target, the model against the measurements between fit probes."""
    n_starts = starts(df)
    df = df.merge(cons, on=["task", "rank"], how="left")
    fit_before = probe_fit(df, BEFORE)
    df["bracket"] = bracket(fit_before, probe_fit(df, AFTER))
    df["gap"] = df.cal_ms / df.consensus_ms - 1  # from the fit runs' consensus
    df["length"] = np.where(df.consensus_ms < SHORT_MS, f"under {SHORT_MS:g} ms", f"{SHORT_MS:g} ms or more")
    df.loc[[(t, r) in apart for t, r in zip(df.task, df["rank"])], "length"] = "held apart"
    for what in ("label_ratio", "tilt"):  # the two probes' geometric mean
        df[f"probe_{what}"] = np.sqrt(df[f"{BEFORE}{what}"] * df[f"{AFTER}{what}"])

    def gaps(g: pd.DataFrame) -> dict[str, object]:
        a = g.gap.abs()
        return {"measurements": len(g), "median |gap|": f"{100 * a.median():.1f}%",
                "median gap": f"{100 * g.gap.median():+.1f}%", f"beyond {TOLERANCE:.0%}": int((a > TOLERANCE).sum())}

    by = pd.DataFrame([{"ranks": length, "probes": b, **gaps(g)}
                       for (length, b), g in df.dropna(subset=["gap"]).groupby(["length", "bracket"])])
    # Over all measurements, not only the gated ones: does the host's state at a measurement, as the probes or the
    # measurement itself read it, say whether it came out high or low? Each against its own target's median (log
    # space), so that a target's offset from its consensus does not count as a state.
    log_ms = np.log(df.cal_ms)
    deviation = log_ms - log_ms.groupby([df.task, df["rank"]]).transform("median")
    corr = {name: float(np.corrcoef(deviation, np.log(df[col]))[0, 1]) if len(df) > 2 else np.nan
            for name, col in (("the probes' label ratio", "probe_label_ratio"), ("their tilt", "probe_tilt"),
                              ("the in-measurement reference", "cal_reference_slowdown"),
                              ("the neighbours' factor (how slow the guest ran them)", "cal_factor"))}
    per = []
    for t in targets:
        g = df[(df.task == t.task) & (df["rank"] == t.rank)]
        fit = g[g.bracket == "both fit"]
        log_median = lambda s: float(np.exp(np.log(s).median())) if len(s) else np.nan  # noqa: E731
        per.append({"task": t.task, "rank": t.rank, "predicted_ms": t.predicted_ms,
                    "consensus_ms": g.consensus_ms.iloc[0] if len(g) else np.nan,
                    "runs": int(g.consensus_runs.iloc[0]) if len(g) else 0,
                    "measurements": len(g), "median_ms": log_median(g.cal_ms), "between_fit": len(fit),
                    "median_between_fit_ms": log_median(fit.cal_ms)})
    per = pd.DataFrame(per)
    per["error, all"] = per.predicted_ms / per.median_ms - 1
    per["error, between fit"] = per.predicted_ms / per.median_between_fit_ms - 1
    per["error, consensus"] = per.predicted_ms / per.consensus_ms - 1
    shown = per.copy()
    for c in ("error, all", "error, between fit", "error, consensus"):
        shown[c] = [f"{100 * x:+.1f}%" if x == x else "" for x in shown[c]]
    # Does a pass last? A gate that waits for a streak assumes it does; on a host where it does not, a pass
    # after a pass is no likelier than any pass.
    both = int((df.bracket == "both fit").sum())
    plural = "s" if n_starts > 1 else ""
    memory = (f"Probes: {len(df) + n_starts} in {n_starts} start{plural}, of which {fit_before.mean():.0%} before "
              f"a measurement passed; after {fit_before.sum()} that passed, the next passed "
              f"{both / max(fit_before.sum(), 1):.0%}." if len(df) else "")
    span = f"{df['at'].min()} to {df['at'].max()} UTC" if len(df) else "nothing measured"
    md = ["Measurements from the consensus, by the probes around each and the rank's length "
          f"({span}; {both} of {len(df)} between two fit probes):", "",
          by.to_markdown(index=False) if len(by) else "(none with a consensus)", "", memory, "",
          "Over every measurement, the correlation of its log ms less its rank's median with: "
          + "; ".join(f"{k} {v:+.2f}" for k, v in corr.items()) + ".", "",
          "Per target (error: predicted over measured, minus 1):", "", shown.round(2).to_markdown(index=False)]
    return md, df


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True)
    ap.add_argument("--targets", nargs="+", type=parse_target, required=True, metavar="TASK_FILE:RANK,RANK")
    ap.add_argument("--searcher", default="torchrec")
    ap.add_argument("--minutes", type=at_least(0, float), default=60.0, help="how long to measure this start")
    ap.add_argument("--report", action="store_true", help="write the report of what was measured; measure nothing")
    ap.add_argument("--runs-glob", default="plan-accuracy-{profile}-{suite}-calibrated-*.csv",
                    help="the committed runs whose consensus each measurement is held against ({profile} and "
                         "{suite} filled in; default the bar's fit runs)")
    ap.add_argument("--apart", nargs="*", type=parse_target, default=[], metavar="TASK_FILE:RANK,RANK",
                    help="targets reported in a group of their own (e.g. ranks whose consensus is in question)")
    ap.add_argument("--name", required=True, help="results file stem: probe-bracket-NAME")
    ap.add_argument("--out", default="bench/results", type=Path)
    args = ap.parse_args()
    load_before = load1()
    targets = plan_targets(args.targets, args.profile, args.searcher)
    stem = f"probe-bracket-{args.name}"
    raw = args.out / f"{stem}.measurements.csv"
    if not args.report:
        measure(targets, args.profile, args.minutes, raw)
    if not raw.exists():
        raise InputError("--report", f"nothing measured yet ({raw} does not exist)", "measure first (without --report)")
    cons = consensus(targets, args.profile, args.searcher, args.runs_glob, args.out)
    runs = int(cons.drop_duplicates("suite").consensus_runs.sum())
    apart = frozenset((load_task(path).name, r) for path, ranks in args.apart for r in ranks)
    body, df = report(pd.read_csv(raw), targets, cons, apart)
    md = [f"# The bar's instrument between fitness probes: {args.name}", "",
          *provenance(load_before, f". Consensus: {runs} committed runs (`{args.runs_glob}`). Measured: real "
                      "FBGEMM CPU kernel times, neighbour-calibrated, one rank at a time, each between two fitness "
                      f"probes; predicted: the committed neural `{args.profile}` model."), "", *body]
    write_report(args.out, stem, md, df)


if __name__ == "__main__":
    sys.exit(exit_status(main))
