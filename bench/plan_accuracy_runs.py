"""The model against many independent measurements of the same plans, and those measurements against each other.

``bench/plan_accuracy.py`` measures the TorchRec plans of a suite once per
run, on a shared VM whose speed drifts, and scores the model against that one
run. A single run cannot tell the model's error from the instrument's. But the
same plans have been measured many times: every committed version of the
suite's plan-accuracy CSVs is an independent run (another hour, another host
state). This script gathers them (from git history, or files given), keeps
the runs whose plans are still the plans the searcher makes today (each
rank's shard signature, or, for runs written before signatures, its shard
count), and reports

- per run: its level against the other runs (median ratio), how far its ranks
  lie from the other runs' consensus (median |difference|, share beyond the
  tolerance; over all ranks and over those of ``--short-ms`` or more, where the
  instrument on a fit host has no floor to hide behind), and the model's MAPE
  against that run alone;
- the model against the consensus of all runs (per rank, the median over runs
  in log space): MAPE, median, share within the tolerance, worst;
- per rank: predicted, consensus, the range and spread over runs.

When the runs disagree with each other about as much as the model disagrees
with them, no single run can show the model any closer. Measured figures are
the runs' (real FBGEMM CPU kernels, each divided by its run's reference
slowdown, or with ``--measured cal_ms`` the neighbour-calibrated figures of
``plan_accuracy.py --calibrate`` runs); predicted ones are the committed
neural model's, or ``--model``'s, recomputed now (the measurements do not
depend on the model: TorchRec plans without it).
Writes ``bench/results/plan-accuracy-runs-<profile>-<suite>.{md,csv}`` (or ``--name``).

    .venv/bin/python bench/plan_accuracy_runs.py --suite data/tasks/unseen-a
    .venv/bin/python bench/plan_accuracy_runs.py --suite data/tasks/unseen-a --measured cal_ms
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import io
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from shardplan.argtypes import at_least
from shardplan.cost.calibration import EARLIER_FEATURES, FEATURES
from shardplan.cost.estimator import PlanEstimator, load_estimator
from shardplan.cost.specs import ShardSpec, rank_specs
from shardplan.errors import InputError, exit_status
from shardplan.formats import load_task, write_text_atomic
from shardplan.search import get_searcher
from plan_accuracy import rank_signature  # sibling scripts: bench/ is on sys.path when run
from pooled import TOLERANCE


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


# The first commit whose measurements keep freed memory in-process, as the cost data was taken; runs
# before it page-faulted inside the timed region (1.2-1.8x on a 24-table rank): another protocol.
FIRST_RUN = "1bddba8"


def committed_runs(pattern: str, since: str = FIRST_RUN) -> dict[str, pd.DataFrame]:
    """Every committed version of the files matching ``pattern`` (a git pathspec glob) from commit
    ``since`` on, oldest first, named ``<commit>:<path>``; versions whose measurements repeat an
    earlier one are dropped."""
    runs: dict[str, pd.DataFrame] = {}
    seen: set[tuple] = set()
    for commit in reversed(_git("log", "--format=%h", f"{since}^..HEAD", "--", pattern).split()):
        for path in _git("show", "--name-only", "--format=", commit, "--", pattern).split():
            try:
                df = pd.read_csv(io.StringIO(_git("show", f"{commit}:{path}")))
            except subprocess.CalledProcessError:  # deleted in that commit
                continue
            key = tuple(np.round(df.meas_ms, 4))
            if key not in seen:
                seen.add(key)
                runs[f"{commit}:{path}"] = df
    return runs


RankKey = tuple[str, int]  # (task name, rank)


def suite_ranks(suite: Path, searcher: str, est: PlanEstimator, optimizer: str | None = None
                ) -> dict[RankKey, list[ShardSpec]]:
    """The shards of every non-empty rank of ``searcher``'s plan of each task in ``suite``, each task trained with
    ``optimizer`` where one is given (as ``plan_accuracy.py --optimizer`` planned it). Tasks it cannot place, or
    whose plan our validator refuses, are left out, as ``plan_accuracy.py`` leaves them."""
    ranks: dict[RankKey, list[ShardSpec]] = {}
    plan_with = get_searcher(searcher)
    for path in sorted(suite.glob("*.json")):
        task = load_task(path)
        if optimizer:
            task = dataclasses.replace(task, optimizer=optimizer)
        est.check_task(task)  # a kind the profile does not price is the caller's error, not a task to skip
        try:
            plan = plan_with.plan(task, est)
        except InputError:  # no plan, or one our validator refuses
            continue
        ranks.update({(task.name, r): specs for r, specs in enumerate(rank_specs(plan)) if specs})
    return ranks


def predicted_ms(est: PlanEstimator, ranks: dict[RankKey, list[ShardSpec]]) -> pd.Series:
    """``est``'s fwd+bwd compute ms of each rank (priced one rank a call, as the runs were scored)."""
    ms = {}
    for key, specs in ranks.items():
        (fwd, bwd), = est.rank_compute([specs])
        ms[key] = fwd + bwd
    return pd.Series(ms)


def pooled_runs(runs: dict[str, pd.DataFrame], ranks: dict[RankKey, list[ShardSpec]], measured: str,
                neighbours_by: str = ",".join(FEATURES), whole: bool = True) -> tuple[pd.DataFrame, list[str]]:
    """The runs that measured exactly today's plans (each rank's shard signature, or for runs written
    before signatures its shard count) with the ``measured`` column (and, for ``cal_ms``, neighbours
    chosen by ``neighbours_by``): their figures, one column per run indexed by (task, rank), and the
    names of the runs dropped. With ``whole=False`` a run that measured only some of the tasks (one part
    way, or of ``plan_accuracy.py --tasks``) is kept too, NaN at the ranks it did not measure."""
    kept, dropped = {}, []
    for name, df in runs.items():
        keys = list(zip(df.task, df["rank"]))
        same = (all(k in ranks and rank_signature(ranks[k]) == s for k, s in zip(keys, df.rank_signature))
                if "rank_signature" in df else all(len(ranks.get(k, ())) == n for k, n in zip(keys, df.shards)))
        by = str(df.cal_features.iloc[0]) if "cal_features" in df else ",".join(EARLIER_FEATURES)
        one_instrument = measured != "cal_ms" or by == neighbours_by
        covers = set(keys) == set(ranks) if whole else bool(keys)  # ``same`` holds every key among ``ranks``
        if same and covers and measured in df and one_instrument:
            kept[name] = df.set_index(["task", "rank"])[measured]
        else:
            dropped.append(name)
    return pd.DataFrame(kept), dropped


def consensus_ms(meas: pd.DataFrame) -> pd.Series:
    """Per rank, the median over runs in log space."""
    return np.exp(np.log(meas).median(axis=1))


def score(err: pd.Series) -> dict[str, float]:
    """The model's errors over measured, minus 1, summed up: MAPE, median, share within :data:`TOLERANCE`,
    worst and median signed error."""
    a = err.abs()
    return {"mape": a.mean(), "median": a.median(), "within": (a <= TOLERANCE).mean(), "worst": a.max(),
            "bias": err.median()}


def run_gaps(meas: pd.DataFrame, predicted: pd.Series, short_ms: float) -> list[dict[str, object]]:
    """Each run against the consensus of the others: its level (median ratio), how far its ranks lie from
    that consensus (median |difference|, share beyond :data:`TOLERANCE`), the same over the ranks the others
    put at ``short_ms`` or more (a host that disturbs the instrument shows there, beyond the short ranks'
    floor), and the model's MAPE and share within the tolerance against the run alone."""
    out = []
    for name in meas if len(meas.columns) > 1 else []:  # one run has no others to compare with
        others = consensus_ms(meas.drop(columns=name))
        gap = (meas[name] / others - 1).abs()
        long = others >= short_ms
        model = score(predicted / meas[name] - 1)
        out.append({"run": name, "level": float(np.exp(np.log(meas[name] / others).median())),
                    "gap_median": gap.median(), "beyond": (gap > TOLERANCE).mean(),
                    "gap_median_long": gap[long].median(), "beyond_long": (gap[long] > TOLERANCE).mean(),
                    "model_mape": model["mape"], "model_within": model["within"]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="data/tasks/unseen-a")
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--searcher", default="torchrec")
    ap.add_argument("--runs", nargs="*", help="plan-accuracy CSVs (default: every committed version of "
                    "bench/results/plan-accuracy-PROFILE-SUITE*.csv)")
    ap.add_argument("--since", default=FIRST_RUN, help="with committed runs: the first commit to read")
    ap.add_argument("--measured", default="meas_ms", choices=("meas_ms", "cal_ms"),
                    help="the runs' reference-divided figures, or their neighbour-calibrated ones")
    ap.add_argument("--neighbours-by", default=",".join(FEATURES),
                    help="with --measured cal_ms, pool only runs calibrated by neighbours chosen by these "
                         f"(default today's, {','.join(FEATURES)}; runs written before the choice was recorded "
                         f"used {','.join(EARLIER_FEATURES)})")
    ap.add_argument("--short-ms", type=at_least(0, float), default=10.0,
                    help="each run's gap is also given over the ranks the other runs put at this or more "
                         "(default %(default)s ms)")
    ap.add_argument("--model", help="a compute-model file to score instead of the committed one")
    ap.add_argument("--name", help="output file stem (default plan-accuracy-runs-PROFILE-SUITE[-cal_ms])")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    suite = Path(args.suite).name
    runs = ({p: pd.read_csv(p) for p in args.runs} if args.runs
            else committed_runs(f"bench/results/plan-accuracy-{args.profile}-{suite}*.csv", args.since))

    est = load_estimator(args.profile, args.model)
    model_name = f"`{args.model}`" if args.model else f"the committed neural `{args.profile}` model"
    ranks = suite_ranks(Path(args.suite), args.searcher, est)
    meas, dropped = pooled_runs(runs, ranks, args.measured, args.neighbours_by)
    if meas.empty:
        raise InputError("--runs", f"no run of today's {args.searcher} plans with `{args.measured}` "
                         + (f"by neighbours chosen by {args.neighbours_by} " if args.measured == "cal_ms" else "")
                         + f"(dropped as other plans, without it or by other neighbours: {dropped})",
                         "give runs of the same plans, or another --measured column or --neighbours-by")
    logm = np.log(meas)
    consensus = consensus_ms(meas)
    predicted = predicted_ms(est, ranks).reindex(meas.index)

    per_run = run_gaps(meas, predicted, args.short_ms)
    overall = score(predicted / consensus - 1)

    table = pd.DataFrame({"predicted_ms": predicted, "consensus_ms": consensus,
                          "error": predicted / consensus - 1, "min_ms": meas.min(axis=1), "max_ms": meas.max(axis=1),
                          "run_spread": np.exp(logm.std(axis=1)) - 1,
                          "runs_within": (np.abs(meas.div(consensus, axis=0) - 1) <= TOLERANCE).mean(axis=1)})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = args.name or f"plan-accuracy-runs-{args.profile}-{suite}" + ("-cal_ms" if args.measured == "cal_ms" else "")
    pd.concat([table, meas], axis=1).to_csv(out / f"{stem}.csv")

    pct = lambda x: f"{100 * x:.1f}%"  # noqa: E731
    n_runs = len(meas.columns)
    md = [f"# The model against {n_runs} independent run{'s' if n_runs > 1 else ''} of the {args.searcher} plans of "
          f"`{args.suite}`", "",
          f"Command: `.venv/bin/python bench/plan_accuracy_runs.py {shlex.join(sys.argv[1:])}`  ",
          f"Date {dt.date.today()}. Measured: each run's figures (real FBGEMM CPU kernels, "
          + (f"neighbour-calibrated, neighbours chosen by {args.neighbours_by}" if args.measured == "cal_ms"
             else "divided by the run's reference slowdown")
          + f"; protocol and machine state in each run's own `.md`). Predicted: {model_name}, recomputed now. "
          f"Consensus: per rank, the median over runs (log space). "
          f"Runs dropped because their plans differ from today's, lack `{args.measured}`"
          + (" or were calibrated by other neighbours" if args.measured == "cal_ms" else "") + f": {len(dropped)}.", "",
          f"**Model vs consensus** ({len(meas)} ranks): MAPE {pct(overall['mape'])}, median {pct(overall['median'])}, "
          f"within {TOLERANCE:.0%}: {pct(overall['within'])} of ranks, worst {pct(overall['worst'])}; "
          f"median signed error {overall['bias'] * 100:+.1f}% (negative: predicted below measured).", "",
          ]
    if per_run:
        md += ["Each run against the consensus of the others (also over the ranks the others put at "
               f"{args.short_ms:g} ms or more), and the model against that run alone:", "",
               "| run | level vs others | median gap to others | ranks beyond 15% | median gap, long ranks "
               "| long ranks beyond 15% | model MAPE vs run | model within 15% |",
               "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        md += [f"| `{r['run']}` | {r['level']:.3f} | {pct(r['gap_median'])} | {pct(r['beyond'])} | "
               f"{pct(r['gap_median_long'])} | {pct(r['beyond_long'])} | "
               f"{pct(r['model_mape'])} | {pct(r['model_within'])} |" for r in per_run]
        md += ["", "Per rank (`runs within 15%`: the share of runs within 15% of the consensus):", "",
               "| task | rank | predicted ms | consensus ms | error | runs' range ms | runs' spread "
               "| runs within 15% |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        md += [f"| {t} | {r} | {x.predicted_ms:.2f} | {x.consensus_ms:.2f} | {x.error * 100:+.1f}% | "
               f"{x.min_ms:.2f}-{x.max_ms:.2f} | {pct(x.run_spread)} | {pct(x.runs_within)} |"
               for (t, r), x in table.iterrows()]
    else:  # one run: no spread to show, and its consensus is the run itself
        md += ["One run: nothing to compare it with, so no spread over runs.", "", "Per rank:", "",
               "| task | rank | predicted ms | measured ms | error |", "| --- | --- | --- | --- | --- |"]
        md += [f"| {t} | {r} | {x.predicted_ms:.2f} | {x.consensus_ms:.2f} | {x.error * 100:+.1f}% |"
               for (t, r), x in table.iterrows()]
    write_text_atomic(out / f"{stem}.md", "\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    sys.exit(exit_status(main))
