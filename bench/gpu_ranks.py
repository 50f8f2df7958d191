"""Plan ranks timed on a GPU as the collector times a sample, and a collection timed again on another machine.

A GPU profile's model learnt its labels at the median host state of the one machine that collected them
(labels less the host's launch jitter, :mod:`shardplan.cost.host_state`). Another machine of the same chip,
or the same one in another hour, runs short ops slower or quicker as its host launches them, which the
reference workload timed beside every sample reads. This report prices measured sets with the profile's
committed model two ways: as trained (the collection's median host state), and at the host state measured
(:func:`shardplan.cost.host_state.by_op`: the gains its training read, applied op by op to the reference
timed beside each set or each plan). All times are measured FBGEMM forward + backward (fused SGD) by CUDA
events; predictions are by the named committed model.

1. ``--retimed``: sets of the profile's collection timed again (``job.sh collect`` with the same seed on
   another machine, so sample k is the same set at the same batch): this machine over the collection's;
2. the committed model on those sets, and on ``--sets`` (other sets never trained on, e.g. a row-slice
   collection);
3. ``--ranks``: every carried plan's ranks timed by the collector's protocol (``shardplan collect ranks
   --plans``), per searcher: TorchRec's plans of the suite's tasks, never trained on, are issue 2's
   "plans nobody tuned for";
4. ``--suites``: the emulated loop's runs of the same plans on the same machine (``bench/gpu_suite.py run``
   CSVs, their plans in ``plans/`` beside them): the loop's rank compute over the collector's, and the model
   on the loop's ranks (compute + modelled comm), at each plan's reference;
5. with both: each rank's compute against its median over every measurement of it on the machine (the
   collector's and each loop round's, as the CPU bars take a rank's median over runs), priced as trained
   and at the machine's median reference: issue 2's bar;
6. ``--parts``: ranks with data-parallel replicas timed whole and each batch's op alone in the same
   repetitions (``job.sh rank-parts``, ``shardplan collect decompositions --by-batch``): which op the model
   misprices, the replicas' (local batch) or the sharded tables' (global batch), per task.

``--model`` scores a candidate model file instead of the committed one.

Writes ``bench/results/<name>.md``.

    .venv/bin/python bench/gpu_ranks.py --profile h100 --name gpu-ranks-h100-s44 \\
        --retimed data/profiles/h100/compute-second-h100.parquet \\
        --ranks data/profiles/h100/plan-ranks-second-h100.parquet \\
        --suites bench/results/gpu-h100-2026-11-26-second/gpu-suite-h100-round1.csv \\
                 bench/results/gpu-h100-2026-11-26-second/gpu-suite-h100-round2.csv
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from shardplan.cost.estimator import load_estimator
from shardplan.cost.host_state import at_reference, by_op, sample_reference_ms
from shardplan.cost.model import batch_parts
from shardplan.cost.profiles import get_profile
from shardplan.cost.specs import rank_specs, specs_from_json
from shardplan.errors import InputError, exit_status
from shardplan.formats import load_plan, write_text_atomic

from gpu_chips import spread  # siblings: bench/ is on sys.path when run
from host_jitter import length_bands

PRICE_HEADER = ["| sets | priced | n | median predicted / measured | MAPE | within 15% | Spearman |",
                "| --- | --- | --- | --- | --- | --- | --- |"]


def _price_row(label: str, priced: str, pred: np.ndarray, meas: np.ndarray) -> str:
    ratio = pred / meas
    err = np.abs(ratio - 1)
    rho = spearmanr(pred, meas).statistic if len(pred) > 2 else float("nan")
    return (f"| {label} | {priced} | {len(ratio)} | {np.median(ratio):.3f} | {100 * err.mean():.1f}% | "
            f"{int((err <= 0.15).sum())}/{len(err)} | {rho:.3f} |")


def _priced(model, df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Measured fwd+bwd, the model's as trained, at each set's reference, at the file's median reference
    (both op by op, :func:`shardplan.cost.host_state.by_op`)."""
    sets = [specs_from_json(s) for s in df["shards"]]
    refs = sample_reference_ms(df)
    return ((df["fwd_ms"] + df["bwd_ms"]).to_numpy(), sum(model.predict(sets)), sum(by_op(model, sets, refs)),
            sum(by_op(model, sets, np.median(refs))))


def _machine(df: pd.DataFrame) -> str:
    uuids = sorted(set(df["gpu_uuid"].dropna())) if "gpu_uuid" in df else []
    return (f"{df['gpu_name'].iloc[0]}" + (f", UUID {', '.join(uuids)}" if uuids else ", no UUID recorded")
            + f", {df['date'].min()[:16]}-{df['date'].max()[11:16]} UTC")


def ranks_report(profile_name: str, name: str, retimed: Path | None, ranks: Path | None,
                 suites: list[Path], sets: list[Path] = (), model_path: Path | None = None,
                 out: Path = Path("bench/results"), parts: Path | None = None) -> str:
    profile = get_profile(profile_name)
    if profile.device != "cuda":
        raise InputError("--profile", f"{profile_name!r} is a CPU profile", "name a GPU profile (h100, h200)")
    est = load_estimator(profile_name, model_path)
    model = est.compute
    summary = model.metadata["host_state"]
    model_file = model_path or f"data/profiles/{profile_name}/compute-model.json"
    lines = [f"# Measured sets on `{profile_name}` priced by {'a candidate' if model_path else 'its committed'} "
             "model, as trained and at the host state measured", "",
             "Command: `.venv/bin/python bench/gpu_ranks.py --profile " + profile_name + f" --name {name}"
             + (f" --model {model_path}" if model_path else "")
             + (f" --retimed {retimed}" if retimed else "") + (" --sets " + " ".join(map(str, sets)) if sets else "")
             + (f" --ranks {ranks}" if ranks else "")
             + (" --suites " + " ".join(map(str, suites)) if suites else "")
             + (f" --parts {parts}" if parts else "") + "`", "",
             f"Model: `{model_file}` (saved {model.metadata.get('saved')}), "
             f"labels at its collection's median reference of {summary['median_reference_ms']:.3f} ms. "
             "*As trained*: its prediction. *At each set's reference*: each op moved by the gains its training read "
             "(fwd/bwd ms per ms of reference excess, by band of op length "
             f"{summary['band_edges_ms']}: {summary['fwd_ms_per_reference_ms']} / "
             f"{summary['bwd_ms_per_reference_ms']}) to the reference timed beside that set (the geometric "
             "mean of before and after); *at the file's median*: to one reading for the whole file, as a "
             "planner would take it once on a host.", ""]
    if retimed is not None:
        collected = pd.read_parquet(profile.dir / "compute.parquet")
        again = pd.read_parquet(retimed)
        key = ["seed", "sample", "batch_size", "shards"]
        both = again.merge(collected, on=key, suffixes=("", "_c"))
        if both.empty:
            raise InputError("--retimed", f"no set of {retimed} is in the profile's compute.parquet",
                             "give sets collected with the profile's seed (job.sh collect)")
        total_c = (both["fwd_ms_c"] + both["bwd_ms_c"]).to_numpy()
        lines += ["## 1. The same sets on this machine and in the collection", "",
                  f"`{retimed}`: {len(both)} sets of `compute.parquet` timed again ({_machine(again)}). "
                  f"Reference workload, median (10th-90th percentile): here {spread(sample_reference_ms(both))} ms, "
                  f"in the collection {spread(np.sqrt(both.ref_before_ms_c * both.ref_after_ms_c))} ms. "
                  "Here over the collection, by band of the collection's fwd+bwd:", "",
                  "| band (ms) | sets | fwd | bwd | fwd+bwd |", "| --- | --- | --- | --- | --- |"]
        for band, rows in length_bands(total_c):
            lines.append(f"| {band} | {int(rows.sum())} | {spread((both.fwd_ms / both.fwd_ms_c)[rows])} | "
                         f"{spread((both.bwd_ms / both.bwd_ms_c)[rows])} | "
                         f"{spread(((both.fwd_ms + both.bwd_ms) / total_c)[rows])} |")
    scored = ([("re-timed", again)] if retimed is not None else []) + [(f"`{p}`", pd.read_parquet(p)) for p in sets]
    if scored:
        lines += ["", "## 2. The model on sets it was not trained on", ""]
        lines += [f"{label}: {len(df)} sets ({_machine(df)}), reference {spread(sample_reference_ms(df))} ms."
                  for label, df in scored[1 if retimed is not None else 0:]]
        lines += ["", *PRICE_HEADER]
        for label, df in scored:
            meas, plain, each, median = _priced(model, df)
            lines += [_price_row(label, "as trained", plain, meas),
                      _price_row(label, "at each set's reference", each, meas),
                      _price_row(label, "at the file's median reference", median, meas)]
    collector = None
    if ranks is not None:
        rk = pd.read_parquet(ranks)
        rk = rk[rk["source"] == "plan-rank"].reset_index(drop=True)
        meas, plain, each, median = _priced(model, rk)
        collector = rk.assign(meas=meas)
        lines += ["", "## 3. Plan ranks timed by the collector's protocol", "",
                  f"`{ranks}`: {len(rk)} ranks of {rk.groupby(['task', 'searcher']).ngroups} plans "
                  f"({_machine(rk)}); reference {spread(sample_reference_ms(rk))} ms.", "", *PRICE_HEADER]
        for searcher, g in rk.groupby("searcher"):
            i = g.index.to_numpy()
            lines += [_price_row(f"`{searcher}`", "as trained", plain[i], meas[i]),
                      _price_row(f"`{searcher}`", "at each rank's reference", each[i], meas[i]),
                      _price_row(f"`{searcher}`", "at the file's median reference", median[i], meas[i])]
        lines += _torchrec_misses(collector, each, "at each rank's reference")
    loops = []
    for path in suites:
        run = pd.read_csv(path)
        refs = sample_reference_ms(run)  # each plan's, the geometric mean of the readings before and after
        rows = []
        for row, ref in zip(run.itertuples(), refs):
            plan = load_plan(path.parent / "plans" / f"{row.task}--{row.searcher}.json")
            for rc, specs, ms in zip(est.estimate(plan).per_rank, rank_specs(plan), json.loads(row.rank_measured_ms)):
                comm = rc.fwd_comm_ms + rc.bwd_comm_ms
                rows.append({"task": row.task, "searcher": row.searcher, "rank": rc.rank, "meas": ms,
                             "loop_compute": ms - comm, "plain": rc.total_ms, "comm": comm,
                             "pred": rc.fwd_compute_ms + rc.bwd_compute_ms, "specs": specs, "ref": ref})
        lp = pd.DataFrame(rows)
        # an empty rank has nothing to price (its loop time less comm is rounding, at times a hair over 0)
        lp = lp[lp.specs.map(len) > 0].reset_index(drop=True)
        lp["at_ref"] = sum(by_op(model, list(lp.specs), lp.ref.to_numpy())) + lp.comm
        round_ref = float(np.median(refs))
        lp["compute_at_round_ref"] = sum(by_op(model, list(lp.specs), round_ref))
        loops.append(lp)
        lines += ["", f"## 4. The emulated loop: `{path}`", "",
                  f"Reference beside the plans {spread(refs)} ms. "
                  "Per rank, compute + modelled comm, then compute alone (the loop's time less the same modelled "
                  "comm: where comm is a large share, as over several hosts, the first rows flatter the model), "
                  f"priced at the round's median reference ({round_ref:.3f} ms; one plan's two readings can "
                  "catch a spike its ops did not feel):", "", *PRICE_HEADER]
        for searcher, g in lp.groupby("searcher"):
            meas, compute = g.meas.to_numpy(), g.loop_compute.to_numpy()
            lines += [_price_row(f"`{searcher}`", "as trained", g.plain.to_numpy(), meas),
                      _price_row(f"`{searcher}`", "at the plan's reference", g.at_ref.to_numpy(), meas),
                      _price_row(f"`{searcher}`", "compute alone, as trained", g.pred.to_numpy(), compute),
                      _price_row(f"`{searcher}`", "compute alone, at the round's median reference",
                                 g.compute_at_round_ref.to_numpy(), compute)]
        if collector is not None:
            pair = lp.merge(collector[["task", "searcher", "rank", "meas"]], on=["task", "searcher", "rank"],
                            suffixes=("", "_collector"))
            lines += ["", "The same ranks' compute, the collector's protocol over the loop's, median (10th-90th "
                      "percentile):", "", "| searcher | ranks | collector / loop |", "| --- | --- | --- |"]
            for searcher, g in pair.groupby("searcher"):
                lines.append(f"| `{searcher}` | {len(g)} | {spread(g.meas_collector / g.loop_compute)} |")
    if collector is not None and loops:
        lines += _median_over_runs(model, collector, loops)
    if parts is not None:
        lines += _parts_section(model, parts)
    text = "\n".join(lines) + "\n"
    write_text_atomic(out / f"{name}.md", text)
    return text


def _median_over_runs(model, collector: pd.DataFrame, loops: list[pd.DataFrame]) -> list[str]:
    """Section 5: every rank's compute, median over the collector's timing and each loop round's."""
    key = ["task", "searcher", "rank"]
    runs = [collector[key + ["meas"]].assign(ref=sample_reference_ms(collector))]
    runs += [lp[key].assign(meas=lp.loop_compute, ref=lp.ref) for lp in loops]
    every = pd.concat(runs, ignore_index=True)
    per_rank = every.groupby(key).agg(meas=("meas", "median"), n=("meas", "size")).reset_index()
    # every rank some loop round ran (rounds may run different plans: one folder, then another)
    priced = pd.concat([lp[key + ["pred", "specs"]] for lp in loops]).drop_duplicates(subset=key)
    per_rank = per_rank.merge(priced, on=key)
    ref = float(np.median(every.ref))
    at_ref = sum(by_op(model, list(per_rank.specs), ref))
    lines = ["", "## 5. Each rank's compute against its median over the machine's measurements", "",
             f"Each rank a loop round ran, its median over the collector's timing and the loop rounds' ({len(loops)} "
             "given; the count beside each searcher is the median number of measurements a rank has); priced as "
             f"trained and at the machine's median reference, {ref:.3f} ms over all of them. Compute alone "
             "(no comm):", "", *PRICE_HEADER]
    for searcher, g in per_rank.groupby("searcher"):
        i, label = g.index.to_numpy(), f"`{searcher}` (median of {int(g.n.median())})"
        pred, meas = g.pred.to_numpy(), g.meas.to_numpy()
        # an oracle no planner has (the machine's own median error taken out): what is left is the ranks' shape
        lines += [_price_row(label, "as trained", pred, meas),
                  _price_row(label, "at the machine's median reference", at_ref[i], meas),
                  _price_row(label, "over the machine's own level (an oracle)", pred / np.median(pred / meas), meas)]
    # both pricings' misses: some machines' hosts are read better by one, some by the other (docs/gpu.md)
    return (lines + _torchrec_misses(per_rank, per_rank.pred.to_numpy(), "as trained")
            + _torchrec_misses(per_rank, at_ref, "at the machine's median reference"))


def _torchrec_misses(ranks: pd.DataFrame, pred: np.ndarray, priced: str) -> list[str]:
    """TorchRec's ranks (the bar's) outside 15%, one row each: the next reading starts from them, not a count."""
    torchrec = ranks.assign(pred=pred, err=pred / ranks.meas - 1).query("searcher == 'torchrec'")
    misses = torchrec[torchrec.err.abs() > 0.15].sort_values("err")
    lines = ["", f"TorchRec's ranks outside 15% {priced}: {len(misses)} of {len(torchrec)}.", ""]
    if len(misses):
        lines += ["| task | rank | measured ms | predicted ms | error |", "| --- | --- | --- | --- | --- |"]
        lines += [f"| {m.task} | {m.rank} | {m.meas:.3f} | {m.pred:.3f} | {100 * m.err:+.1f}% |"
                  for m in misses.itertuples()]
    return lines


def _parts_section(model, path: Path) -> list[str]:
    """Section 6: each rank's ops timed alone (the local batch's, the global batch's), priced one by one."""
    df = pd.read_parquet(path)
    df = df[df["parts"] == "batches"].reset_index(drop=True) if "parts" in df else df.iloc[:0]
    if df.empty:
        raise InputError("--parts", f"no rank timed op by op in {path}",
                         "give the file of `shardplan collect decompositions --by-batch` (job.sh rank-parts)")
    parts, owner = batch_parts([specs_from_json(s) for s in df["shards"]])  # each rank's ops, smallest batch first
    fwd, bwd = model.predict(parts)
    refs = np.array([np.median(r) for r in df["ref_ms"]])
    at_f, at_b = at_reference(model.metadata["host_state"], fwd, bwd, refs[owner])
    meas = np.concatenate([np.add(f, b) for f, b in zip(df["alone_fwd_ms"], df["alone_bwd_ms"])])
    first = np.r_[True, owner[1:] != owner[:-1]]  # the local batch's op (the replicas) opens each rank
    table = pd.DataFrame({"task": df["task"].to_numpy()[owner], "replicas": first, "meas": meas,
                          "plain": fwd + bwd, "at_ref": at_f + at_b})
    whole = (df["whole_fwd_ms"] + df["whole_bwd_ms"]).to_numpy()
    alone = np.bincount(owner, weights=meas)
    lines = ["", "## 6. Each rank's ops timed apart", "",
             f"`{path}`: {len(df)} ranks with data-parallel replicas ({_machine(df)}), each timed whole and each "
             f"batch's op alone in {int(df['reps'].iloc[0])} repetitions (medians; reference {spread(refs)} ms). "
             f"Whole over the sum of its ops: {spread(whole / alone)} (1 by construction: the ops run one after "
             "the other). Each op priced on its own:", "", *PRICE_HEADER]
    for label, rows in (("replicas (local batch)", table.replicas), ("sharded (global batch)", ~table.replicas)):
        g = table[rows]
        lines += [_price_row(label, "as trained", g.plain.to_numpy(), g.meas.to_numpy()),
                  _price_row(label, "at each rank's reference", g.at_ref.to_numpy(), g.meas.to_numpy())]
    lines += ["", "By task, median predicted over measured (as trained; at each rank's reference), and the measured "
              "ms:", "", "| task | ranks | replicas: predicted / measured | measured ms | "
              "sharded: predicted / measured | measured ms |", "| --- | --- | --- | --- | --- | --- |"]
    for task, g in table.groupby("task"):
        rep, sh = g[g.replicas], g[~g.replicas]
        lines.append(f"| {task} | {len(rep)} | {np.median(rep.plain / rep.meas):.3f}; "
                     f"{np.median(rep.at_ref / rep.meas):.3f} | {np.median(rep.meas):.3f} | "
                     f"{np.median(sh.plain / sh.meas):.3f}; {np.median(sh.at_ref / sh.meas):.3f} | "
                     f"{np.median(sh.meas):.3f} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="h100")
    ap.add_argument("--name", required=True, help="the results file's name (bench/results/NAME.md)")
    ap.add_argument("--retimed", type=Path, help="sets of the profile's collection timed again elsewhere")
    ap.add_argument("--sets", nargs="*", type=Path, default=[], metavar="PARQUET",
                    help="other sets of this profile never trained on, scored as they are (no pairing)")
    ap.add_argument("--model", type=Path, help="a candidate compute-model file instead of the committed one")
    ap.add_argument("--ranks", type=Path, help="plan ranks timed by the collector (shardplan collect ranks --plans)")
    ap.add_argument("--suites", nargs="*", type=Path, default=[], metavar="CSV",
                    help="bench/gpu_suite.py run CSVs of the same plans on the same machine")
    ap.add_argument("--parts", type=Path, help="ranks timed op by op (shardplan collect decompositions --by-batch)")
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args(argv)
    for name in ("retimed", "ranks", "model", "parts"):
        path = getattr(args, name)
        if path is not None and not path.is_file():
            raise InputError(f"--{name}", f"no file at {path}", "give an existing file")
    for path in args.sets + args.suites:
        if not path.is_file():
            raise InputError("--sets/--suites", f"no file at {path}", "give existing files")
    print(ranks_report(args.profile, args.name, args.retimed, args.ranks, args.suites, args.sets, args.model,
                       args.out, args.parts))


if __name__ == "__main__":
    sys.exit(exit_status(main))
