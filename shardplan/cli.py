"""The ``shardplan`` command line.

Every subcommand checks its input first; an :class:`~shardplan.errors.InputError`
prints ``error: <field>: <problem> (<fix>)`` and exits with code 2, having
written nothing. Output files are written atomically.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .argtypes import at_least, int_list
from .cost.draws import REPLICA_MAX_ROWS, REPLICA_WORLDS, ROW_SHARE, ROW_SPLITS, SetShape
from .cost.profiles import DEFAULT_PROFILE, HostChip, Profile
from .domain import DTYPE_BYTES, OPTIMIZERS
from .errors import InputError, exit_status

if TYPE_CHECKING:  # imported where used: it loads torch, too slow for --help
    from .cost.fit_gate import FitGate

COLLECT_POOLS = ("meta_synthetic", "criteo_kaggle", "criteo_terabyte", "mlperf_dlrmv2")
SEED_HELP = "searchers that draw use it: the same task and seed give the same plan (default %(default)s)"
POOLS_HELP = "comma-separated table pools (data/pools/<name>.json) to draw from (default %(default)s)"
DEFAULT_TASK = Path(__file__).resolve().parent.parent / "data" / "tasks" / "default.json"


def command_line() -> str:
    """The command this process runs, as results files record it (so they say how to reproduce them)."""
    import shlex

    return "shardplan " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def _estimator(args: argparse.Namespace):
    from .cost.estimator import load_estimator

    reference = getattr(args, "host_reference_ms", None)
    if reference == "auto":  # this machine's own state, timed now on its GPU
        from .cost.host_state import time_host_reference
        from .cost.profiles import get_profile

        reference = time_host_reference(get_profile(args.profile), flag="--host-reference-ms auto")[0]
    return load_estimator(args.profile, getattr(args, "model", None), reference)


def _reference_ms(text: str) -> float | str:
    """``--host-reference-ms``: a number of ms (``load_estimator`` checks it is positive), or ``auto``."""
    if text == "auto":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of ms or auto, got {text!r}") from None


def _cmd_collect_compute(args: argparse.Namespace) -> int:
    from .cost.collect import collect_compute
    from .cost.profiles import check_collect_target, get_profile
    from .pools import load_pool

    profile = get_profile(args.profile)
    pool = [t for name in args.pools.split(",") for t in load_pool(name)]
    shape = SetShape(min_table_rows=args.min_table_rows, min_pooling=args.min_pooling, min_zipf=args.min_zipf,
                     min_cols=args.min_cols,
                     row_share=args.row_share, row_splits=int_list("--row-splits", args.row_splits),
                     replica_share=args.replica_share,
                     replica_worlds=int_list("--replica-worlds", args.replica_worlds),
                     replica_max_rows=args.replica_max_rows,
                     batch_sizes=None if args.batch_sizes is None else int_list("--batch-sizes", args.batch_sizes))
    default_name = "compute.parquet" if args.max_shards <= 15 else "compute-large.parquet"
    out = Path(args.out) if args.out else profile.dir / default_name
    check_collect_target(profile, out)
    df = collect_compute(profile, pool, out, args.samples, seed=args.seed, optimizer=args.optimizer, dtype=args.dtype,
                         repeats=args.repeats, min_shards=args.min_shards, max_shards=args.max_shards,
                         max_seconds=args.max_seconds, shape=shape, wait_quiet_s=args.wait_quiet)
    print(f"{out}: {len(df)} samples")
    return 0


def _check_copy_target(profile: Profile, source: tuple[str, Path, str], target: tuple[Path, str]) -> None:
    """A collector that writes new rows of another file's sets: the source (its field, path and the fix when it is
    missing) must exist, and the target (its path and the fix) be another file that ``profile`` may write."""
    from .cost.profiles import check_collect_target

    (field, src, src_fix), (out, out_fix) = source, target
    if not src.is_file():
        raise InputError(field, f"no cost-data file at {src}", src_fix)
    if src.resolve() == out.resolve():
        raise InputError("--out", "is the source file", out_fix)
    check_collect_target(profile, out)


def _cmd_collect_retime(args: argparse.Namespace) -> int:
    from .cost.collect import retime
    from .cost.profiles import get_profile

    profile = get_profile(args.profile)
    src, out = Path(args.src), Path(args.out)
    _check_copy_target(profile, ("SRC", src, "give a parquet file written by shardplan collect"),
                       (out, "write the new timings to another file"))
    df = retime(profile, src, out, wait_quiet_s=args.wait_quiet)
    print(f"{out}: {len(df)} rows re-timed from {src}")
    return 0


def _cmd_collect_paired(args: argparse.Namespace) -> int:
    from .cost.collect_paired import collect_paired
    from .cost.profiles import get_profile

    profile, base = get_profile(args.profile), get_profile(args.base)
    src = Path(args.src) if args.src else base.dir / "compute.parquet"
    out = Path(args.out) if args.out else profile.dir / src.name
    _check_copy_target(profile, ("--src", src, f"give a parquet file of {base.name}'s folder"),
                       (out, "write the new kind's labels to another file"))
    df = collect_paired(profile, base, src, out, args.optimizer, args.dtype, visits=args.visits, sets=args.sets,
                        max_seconds=args.max_seconds, held_out=args.held_out,
                        wait_fit_s=None if args.wait_fit is None else 60 * args.wait_fit)
    print(f"{out}: {len(df)} rows labelled {args.optimizer}/{args.dtype} from {src}")
    return 0


def _cmd_collect_ranks(args: argparse.Namespace) -> int:
    from .cost.collect_ranks import collect_plan_ranks
    from .cost.profiles import check_collect_target, get_profile

    profile = get_profile(args.profile)
    if args.plans:  # plans made elsewhere (the GPU machine has no TorchRec to plan with)
        from .cost.collect_ranks import collect_carried_plan_ranks

        plan_paths = sorted(Path(args.plans).glob("*.json"))
        if not plan_paths:
            raise InputError("--plans", f"no plan files in {args.plans}", "give the folder the plans were saved to")
        out = Path(args.out) if args.out else profile.dir / "compute-ranks.parquet"
        check_collect_target(profile, out)
        df = collect_carried_plan_ranks(profile, plan_paths, out, round_=args.round, wait_fit_s=60 * args.wait_fit,
                                        wait_quiet_s=args.wait_quiet)
        print(f"{out}: {int((df['source'] == 'plan-rank').sum())} rank samples")
        return 0
    paths = sorted(Path(args.suite).glob("*.json"))
    if not paths:
        raise InputError("--suite", f"no task files in {args.suite}")
    if args.visits > 1:  # a task's plans timed together, for within-task relative labels
        if args.wait_quiet:  # one divisor per task, no per-rank gate to wait on
            raise InputError("--wait-quiet", "has no per-rank quiet gate to wait on with --visits above 1 (a task's "
                             "plans share one divisor)", "leave --wait-quiet out, or time ranks one by one")
        from .cost.collect_ranks import collect_plan_groups

        out = Path(args.out) if args.out else profile.dir / "compute-plan-groups.parquet"
        check_collect_target(profile, out)
        df = collect_plan_groups(profile, paths, args.searchers.split(","), _estimator(args), out,
                                 rounds=args.rounds, visits=args.visits, round_=args.round)
        print(f"{out}: {len(df)} rank samples in {df['group'].nunique() if len(df) else 0} task groups")
        return 0
    out = Path(args.out) if args.out else profile.dir / "compute-ranks.parquet"
    check_collect_target(profile, out)
    df = collect_plan_ranks(profile, paths, args.searchers.split(","), _estimator(args), out, round_=args.round,
                            wait_fit_s=60 * args.wait_fit, wait_quiet_s=args.wait_quiet)
    print(f"{out}: {int((df['source'] == 'plan-rank').sum())} rank samples")
    return 0


def _cmd_collect_decompositions(args: argparse.Namespace) -> int:
    from .cost.collect_decomp import collect_decompositions
    from .cost.profiles import check_collect_target, get_profile

    profile = get_profile(args.profile)
    src = Path(args.src) if args.src else profile.dir / "compute-ranks.parquet"
    if not src.is_file():
        raise InputError("--src", f"no plan-rank file at {src}", "collect plan ranks first (shardplan collect ranks)")
    name = "compute-batch-parts.parquet" if args.by_batch else "compute-decompositions.parquet"
    out = Path(args.out) if args.out else profile.dir / name
    check_collect_target(profile, out)
    df = collect_decompositions(profile, out, args.sets, args.reps, src, args.max_seconds, by_batch=args.by_batch,
                                skip=[Path(f) for f in args.skip])
    print(f"{out}: {len(df)} decompositions")
    return 0


def _cmd_collect_hot_mixes(args: argparse.Namespace) -> int:
    from .cost.collect_hot import collect_hot_mixes, suite_table_names
    from .cost.profiles import check_collect_target, get_profile
    from .pools import load_pool

    profile = get_profile(args.profile)
    suites = [Path(s) for s in args.exclude_suites.split(",") if s]
    for suite in suites:
        if not any(suite.glob("*.json")):
            raise InputError("--exclude-suites", f"no task files in {suite}", "name suite folders of task files")
    held_out = suite_table_names(suites)
    pool = [t for name in args.pools.split(",") for t in load_pool(name) if t.name not in held_out]
    out = Path(args.out) if args.out else profile.dir / f"compute-{args.recipe}-mixes.parquet"
    check_collect_target(profile, out)
    df = collect_hot_mixes(profile, pool, out, args.sets, seed=args.seed, max_seconds=args.max_seconds,
                           recipe=args.recipe)
    print(f"{out}: {len(df)} {args.recipe} mixes ({len(held_out)} tables of {len(suites)} suites left out of "
          "the pools)")
    return 0


def _cmd_collect_comm(args: argparse.Namespace) -> int:
    import datetime as dt

    import pandas as pd

    from .cost.comm import FittedCommModel
    from .cost.comm_collect import collect_comm
    from .cost.profiles import check_collect_target, get_profile

    profile = get_profile(args.profile)
    if profile.device != "cpu":
        raise InputError("profile", f"{profile.name} comm cannot be measured here",
                         "its comm model is the alpha-beta model")
    out = profile.dir / "comm.parquet"
    check_collect_target(profile, out)
    world_sizes = int_list("--world-sizes", args.world_sizes)
    if min(world_sizes) < 2:
        raise InputError("--world-sizes", f"an all-to-all needs 2 processes or more, got {args.world_sizes!r}",
                         "e.g. 2,3,4")
    rows_before = len(pd.read_parquet(out)) if out.exists() else 0
    df = collect_comm(profile, out, world_sizes, args.configs)
    model_path = profile.dir / "comm-model.json"
    if len(df) == rows_before and model_path.exists():  # a finished run again: keep the model and its date
        print(f"{out}: {len(df)} rows, nothing new; {model_path} kept")
        return 0
    model = FittedCommModel.fit(df.to_dict("records"), profile.name)
    model.save(model_path, {
        "data": "data/profiles/%s/comm.parquet" % profile.name, "rows": len(df),
        "command": f"shardplan collect comm --profile {profile.name}", "date": dt.date.today().isoformat()})
    print(f"{out}: {len(df)} rows; fit {model.fit_report}; coef {model.coef}")
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from .cost.profiles import get_profile
    from .cost.train import report_markdown, train_and_report

    data_dir = Path(args.data_dir) if args.data_dir else None
    if data_dir is not None and not (data_dir / "compute.parquet").is_file():
        raise InputError("--data-dir", f"no compute.parquet in {data_dir}",
                         "name a profile's data folder, or one bench/targeted_data.py wrote")
    if data_dir is not None and args.out is None:  # its files may be links to the profile's committed ones
        raise InputError("--out", "is needed with --data-dir", "name the candidate's folder")
    meta = train_and_report(get_profile(args.profile), epochs=args.epochs, seed=args.seed,
                            data_dir=data_dir, out_dir=args.out, random_level=args.random_level,
                            split_batches=args.split_batches,
                            context_totals=args.context_totals, decompositions=args.decompositions,
                            hot_mixes=args.hot_mixes, long_ranks=args.long_ranks,
                            crowded_mixes=args.crowded_mixes, context_code=args.context_code,
                            slowdown_window_s=args.slowdown_window_s, retimes=args.retimes,
                            init=get_profile(args.init) if args.init else None, huber_delta=args.huber_delta,
                            components=args.components, moderate_mixes=args.moderate_mixes)
    print(report_markdown(meta))
    return 0


def _cmd_train_policy(args: argparse.Namespace) -> int:
    from .cost.profiles import get_profile
    from .search.rl import train_policy

    out = Path(args.out) if args.out else get_profile(args.profile).dir / "rl-policy.json"
    meta = train_policy(_estimator(args), out, updates=args.updates, seed=args.seed)
    print(f"wrote {out}: predicted cost over lower bound {meta['cost_over_bound_first_last'][0]} "
          f"(first updates) -> {meta['cost_over_bound_first_last'][1]} (last)")
    return 0


def _cmd_make_tasks(args: argparse.Namespace) -> int:
    import numpy as np

    from .cost.profiles import get_profile
    from .formats import save_task
    from .pools import load_pool
    from .taskgen import generate_task

    profile = get_profile(args.profile)
    pool = [t for name in args.pools.split(",") for t in load_pool(name)]
    out = Path(args.out)
    tables = int_list("--tables", args.tables)
    if len(tables) != 2 or not 1 <= tables[0] <= tables[1]:
        raise InputError("--tables", f"must be MIN,MAX with 1 <= MIN <= MAX, got {args.tables!r}", "e.g. 10,60")
    world_sizes = int_list("--world-sizes", args.world_sizes)
    if min(world_sizes) < 1:
        raise InputError("--world-sizes", f"must be ranks per task, at least 1, got {args.world_sizes!r}", "e.g. 2,4,8")
    if args.ranks_per_host and any(w % args.ranks_per_host for w in world_sizes):
        raise InputError("--world-sizes", f"{args.world_sizes!r} are not all multiples of --ranks-per-host "
                         f"{args.ranks_per_host}", "give world sizes that whole hosts make up, e.g. 16,32 with 8")
    for i in range(args.count):
        rng = np.random.default_rng([args.seed, i])
        oversize = args.oversize_every > 0 and i % args.oversize_every == args.oversize_every - 1
        name = args.suite if args.count == 1 else f"{args.suite}-{i:02d}"
        task = generate_task(rng, pool, name, profile, num_tables=tables, world_sizes=world_sizes,
                             oversize=oversize, batch_size_per_rank=args.batch_size_per_rank,
                             ranks_per_host=args.ranks_per_host)
        save_task(task, out / f"{task.name}.json")
    print(f"{args.count} tasks in {out}")
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    from .formats import load_task, save_plan
    from .report_text import cost_table, plan_table
    from .search import DEFAULT_SEARCHER, get_searcher

    task = load_task(args.task)
    types = args.sharding_types.split(",") if args.sharding_types else None
    searcher = get_searcher(args.searcher or DEFAULT_SEARCHER, types)
    plan = _make_plan(searcher, task, args)
    save_plan(plan, args.out)
    print(plan_table(plan))
    print(cost_table(plan.cost))
    print(f"wrote {args.out} ({plan.search['searcher']}, {plan.search['seconds']:.3f} s)")
    return 0


def _make_plan(searcher, task, args: argparse.Namespace):
    """``searcher``'s plan of ``task``; with ``--refine N``, refined against timings of its ranks together
    with the searcher's runners-up (:mod:`.search.refine`)."""
    est = _estimator(args)
    if not args.refine:
        return searcher.plan(task, est, seed=args.seed)
    from .search.refine import plan_refined

    out = plan_refined(searcher, task, est, args.profile, seed=args.seed, iterations=args.refine)
    rec = out.search["refine"]
    final = rec["final_measured_ms"]
    print(f"refined in {rec['seconds']:.0f} s: " + (
        f"{rec['candidates']} plans timed together, measured max {min(final):.2f} ms against the "
        f"searcher's pick's {final[0]:.2f} ms" if final else "the timings agree with the model's balance; plan kept"))
    return out


def _evaluate(plan, args: argparse.Namespace):
    from dataclasses import replace

    from .execute.measure import measure_plan, measure_plan_calibrated

    plan = replace(plan, cost=_estimator(args).estimate(plan))
    if args.calibrate:
        plan = replace(plan, measured_cost=measure_plan_calibrated(plan, args.profile, rounds=args.rounds))
    elif args.measure:
        plan = replace(plan, measured_cost=measure_plan(plan, args.profile, rounds=args.rounds, visits=args.visits))
    return plan


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from .cost.profiles import profile_for
    from .formats import load_plan, save_plan
    from .report_text import cost_table, measured_note
    from .validate import validate_plan

    plan = load_plan(args.plan)
    validate_plan(plan)
    args.profile = profile_for(plan, args.profile)
    plan = _evaluate(plan, args)
    save_plan(plan, args.out)
    print(cost_table(plan.cost, plan.measured_cost))
    if plan.measured_cost:
        print(measured_note(plan.measured_cost))
    print(f"wrote {args.out}")
    return 0


def _model_profile(path: str) -> str:
    """The profile a compute-model file names (the default where it cannot be read: loading it
    later reports what is wrong with it)."""
    import json

    try:
        return str(json.loads(Path(path).read_text())["profile"])
    except (OSError, ValueError, KeyError, TypeError):
        return DEFAULT_PROFILE


def _cmd_run(args: argparse.Namespace) -> int:
    """The main job: plan a task with the default searcher, show the plan, predicted and measured cost."""
    from .cost.profiles import local_profile
    from .formats import load_task, save_plan
    from .report_text import cost_table, measured_note, plan_table
    from .search import DEFAULT_SEARCHER, get_searcher

    task = load_task(args.task)
    if args.profile is None:  # the model file's own profile, else this host's for the task's optimizer and dtype
        args.profile = _model_profile(args.model) if args.model else local_profile((task.optimizer, task.dtype))
    plan = _make_plan(get_searcher(DEFAULT_SEARCHER), task, args)
    plan = _evaluate(plan, args)
    save_plan(plan, args.out)
    print(f"task {task.name}: {len(task.tables)} tables, {task.topology.world_size} ranks, "
          f"batch {task.batch_size_per_rank}/rank, {task.topology.memory_per_rank_gb} GB/rank")
    print(f"plan by {plan.search['searcher']} in {plan.search['seconds']:.2f} s:")
    print(plan_table(plan))
    print(cost_table(plan.cost, plan.measured_cost))
    if plan.measured_cost:
        print(measured_note(plan.measured_cost))
    print(f"wrote {args.out}")
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from .execute.bench import REFERENCE, geomean_vs, run_bench
    from .search import SEARCHERS

    names = ([REFERENCE] + sorted(n for n in SEARCHERS if n != REFERENCE) if args.searchers == "all"
             else args.searchers.split(","))
    for n in names:
        if n not in SEARCHERS:
            raise InputError("--searchers", f"unknown searcher {n!r}", f"use some of {sorted(SEARCHERS)}")
    suite = Path(args.suite)
    name = args.name or f"bench-{args.profile}-{suite.name}"
    df = run_bench(suite, names, _estimator(args), args.profile, args.rounds, Path(args.out), name, args.seed,
                   limit=args.limit, pattern=args.tasks, command=command_line(), gate=fit_gate(args),
                   visits=args.visits)
    print(geomean_vs(df).to_string(index=False))
    print(f"wrote {args.out}/{name}.csv and .md")
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from .formats import load_plan
    from .validate import plan_problems

    problems = plan_problems(load_plan(args.plan))
    for p in problems:
        print(p)
    print("valid" if not problems else f"{len(problems)} problem(s)")
    return 0 if not problems else 1


def _cmd_searchers(args: argparse.Namespace) -> int:
    from .search import DEFAULT_SEARCHER, SEARCHERS

    for name, cls in sorted(SEARCHERS.items()):
        print(f"{name:<20}{' (default)' if name == DEFAULT_SEARCHER else '':<11}{cls.description}")
    return 0


def _cmd_profiles(args: argparse.Namespace) -> int:
    from .cost.profiles import (BROKEN_PROFILES, DEFAULT_KIND, PROFILES, chip_note, host_chip, host_cpu,
                                host_profiles, measured_on_this_cpu, model_kinds, new_profile)

    if args.profile and not (args.probe or args.host_reference):
        raise InputError("--profile", "only goes with --probe or --host-reference",
                         "add the one it is for, or leave out --profile")
    if args.new:
        if not args.like:
            raise InputError("--like", "--new needs the profile whose protocol and budgets to copy",
                             f"add --like {DEFAULT_PROFILE} (or another of `shardplan profiles`)")
        made = new_profile(args.new, args.like, args.description)
        print(f"made {made.dir / 'profile.json'} ({made.description}); its README says what to collect next")
        return 0
    if args.like or args.description:
        raise InputError("--like" if args.like else "--description", "only goes with --new NAME")
    if args.show:
        print(_profile_progress(args.show))
        return 0
    mine = host_profiles()
    here = mine[0] if mine else None
    others = (f" (also measured on this CPU: {', '.join(p.name for p in mine[1:])}; shardplan run takes "
              f"{here.name}; SHARDPLAN_PROFILE=NAME or --profile picks another)" if len(mine) > 1 else "")
    chip = host_chip()
    about = chip.describe()
    print(f"this host: {host_cpu()!r}{f' ({about})' if about else ''}; its profile: "
          f"{here.name if here else 'none trained'}{others}")
    note = chip_note(here, chip) if here else None
    if note:
        print(note)
    rows = []
    for name, p in PROFILES.items():
        trained = ("trained" if (p.dir / "compute-model.json").exists() else
                   "roofline only" if p.published else "no compute model")  # an untrained GPU plans by its HBM
        kinds = model_kinds(p)  # a profile of another optimizer or weight type than the default's says which
        kind = "" if kinds == ([DEFAULT_KIND[0]], [DEFAULT_KIND[1]]) else f" ({', '.join(sum(kinds, []))})"
        tags = [t for t, on in (("default", name == DEFAULT_PROFILE), ("this host", measured_on_this_cpu(p))) if on]
        rows.append((name, ", ".join(tags), trained + kind, p.description + _host_state_note(p)))
    rows += [(name, "", "unusable", problem) for name, problem in BROKEN_PROFILES.items()]
    # each column as wide as its longest entry: a kind in the state column must not run into the description
    width, state_width = (max((len(r[i]) for r in rows), default=0) + 1 for i in (0, 2))
    for name, tags, state, text in rows:
        print(f"{name:<{width}}{tags:<20}{state:<{state_width}}{text}")
    if args.probe:
        print(_probe_note(_probe_target(args.profile, here), chip))
    if args.host_reference:
        print(_host_reference_note(args.profile))
    return 0


def _profile_progress(name: str) -> str:
    """``profiles --show NAME``: the profile's protocol, each step's file and what it holds, the next command."""
    from tabulate import tabulate

    from .cost.profile_steps import progress
    from .cost.profiles import get_profile

    p = get_profile(name)
    done = progress(p)
    rows = [[s.name, s.file, detail or ("missing" + (" (planning needs it)" if s.needed_to_plan else ""))]
            for s, detail in done]
    todo = [s for s, detail in done if detail is None]
    chip = p.chip.describe()
    protocol = (f"{p.device}{f', {p.threads} thread(s) a rank' if p.device == 'cpu' else ''}, "
                f"{p.warmup} warm-up then the median of "
                f"{p.repeats}, global batches {', '.join(map(str, p.collect_batch_sizes))}"
                + (f", CPU {p.cpu_model!r}" if p.cpu_model else "") + (f" ({chip})" if chip else ""))
    lines = [f"{p.name}: {p.description}", f"{p.dir / 'profile.json'}: {protocol}"]
    if p.published:
        f = p.published
        lines.append(f"published (modelled, not measured): HBM {f.hbm_bytes_per_s / 1e12:g} TB/s ({f.hbm_source}); "
                     f"NVLink {f.nvlink_gbps:g} GB/s and network {f.network_gbps:g} GB/s each way, latency "
                     f"{f.alpha_intra_us:g}/{f.alpha_inter_us:g} us ({f.comm_source})")
    lines += ["", tabulate(rows, headers=["step", "file", "holds"])]
    if todo:
        first = next((s for s in todo if s.needed_to_plan), todo[0])
        lines += ["", f"next ({first.name}): {'; '.join(first.commands)}"]
    return "\n".join(lines)


def _host_state_note(profile: Profile) -> str:
    """For a GPU profile's trained model: the host state it prices at unless told another."""
    import json

    path = profile.dir / "compute-model.json"
    if profile.device != "cuda" or not path.exists():
        return ""
    state = json.loads(path.read_text()).get("metadata", {}).get("host_state")
    if not state:
        return ""
    return (f"; priced at its collection's host reference, {state['median_reference_ms']:.3f} ms "
            "(--host-reference-ms MS|auto for another host)")


def _host_reference_note(profile_name: str | None) -> str:
    """``profiles --host-reference``: the reference workload timed on this machine's device, to price a GPU
    profile at this host's state (``--host-reference-ms``): its short ops wait on launches the host issues."""
    import torch

    from .cost.host_state import time_host_reference
    from .cost.profiles import get_profile

    if profile_name is None:
        raise InputError("--profile", "--host-reference needs the GPU profile to price", "add --profile h100 (or h200)")
    ms, readings = time_host_reference(get_profile(profile_name))
    return (f"host reference ({profile_name}, {torch.cuda.get_device_name(0)}): {ms:.4f} ms, median of "
            f"{len(readings)} ({min(readings):.4f}-{max(readings):.4f}); price with --host-reference-ms {ms:.4f} "
            "(or auto)")


def _probe_target(name: str | None, here: Profile | None) -> Profile | None:
    """The profile ``profiles --probe`` re-times: ``--profile``'s, else the one ``run`` measures with
    (``$SHARDPLAN_PROFILE``'s, else this host's own). A CPU name can be two machines' (``cpu-2c`` and
    ``cpu-2c-nested`` are both 'AMD EPYC'), so which of them this host runs like is asked by naming each."""
    from .cost.profiles import PROFILE_ENV, get_profile

    if name:
        return get_profile(name)
    return get_profile(DEFAULT_PROFILE) if os.environ.get(PROFILE_ENV) else here


def _probe_note(profile: Profile | None, chip: HostChip) -> str:
    """``profiles --probe``: whether this host (of :class:`HostChip` ``chip``) runs its profile's stored ranks
    as fast as their labels say.
    A CPU's name does not tell two machines apart (session 39's AMD EPYC guest ran ``cpu-2c``'s stored ranks
    at 2-2.7x their labels); timing a few of them does."""
    from .cost.fitness import probe
    from .cost.profiles import chip_differences
    from .report_text import FAR_FACTOR, far_from_labels

    if profile is None:
        raise InputError("--probe", "this host's CPU has no profile of its own to probe",
                         "name one with --profile, collect one (shardplan collect compute --profile <name>), "
                         "or leave out --probe")
    if profile.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise InputError("--profile", f"{profile.name!r} is a GPU profile and this machine has no CUDA device "
                             "to re-time its ranks on", "probe a CPU profile here, or run it on the GPU machine")
    fitness = probe(profile)
    if fitness is None:
        return f"probe ({profile.name}): the profile has no stored plan ranks to re-time"
    raw = fitness.label_ratio * fitness.reference_slowdown  # the probe divides by the reference; undo it
    line = f"probe ({profile.name}): {fitness.describe()}; undivided, the stored ranks ran {raw:.2f}x their labels"
    if far_from_labels(raw):
        differences = chip_differences(profile, chip)
        same = "though its CPU has the same name" + (f": this host's {' and its '.join(differences)}"
                                                     if differences else "")
        line += (f"\nthis host does not run like the one {profile.name}'s labels were taken on (beyond "
                 f"{FAR_FACTOR}x either way, {same}): its predictions are that host's; "
                 "measure with --calibrate to put timings on that host, or collect a profile of this one")
    return line


def _cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from .api import Limits, create_app

    for name in ("workers", "max_tables", "max_world_size", "max_body_bytes"):
        if getattr(args, name) < 1:
            raise InputError("--" + name.replace("_", "-"), "must be at least 1")
    if args.max_budget_s <= 0:
        raise InputError("--max-budget-s", "must be positive")
    limits = Limits(max_tables=args.max_tables, max_world_size=args.max_world_size,
                    max_body_bytes=args.max_body_bytes, max_budget_s=args.max_budget_s, workers=args.workers)
    profiles = args.profiles.split(",") if args.profiles else None
    uvicorn.run(create_app(limits, profiles), host=args.host, port=args.port, log_level=args.log_level)
    return 0


MEASURED_DMP = ("measured: wall-clock of the timed iterations of a real multi-process TorchRec "
                "DistributedModelParallel training (the slowest rank's), samples/s = global batch x "
                "iterations / seconds; median over the interleaved rounds")


def _cmd_train_dmp(args: argparse.Namespace) -> int:
    import statistics

    from .cost.kernel import require_device
    from .cost.profiles import profile_for
    from .execute.dmp import compare, default_backend, memory_rows, torchrec_plan_for
    from .formats import load_plan, write_json_atomic
    from .validate import validate_plan

    plan = load_plan(args.plan)
    validate_plan(plan)
    require_device(plan.task.topology.device, "topology.device", "train a GPU plan on a machine with the GPUs")
    backend = args.backend or default_backend(plan)
    plans = {"plan": plan}
    if args.vs_torchrec:
        plans["torchrec"] = torchrec_plan_for(plan.task, backend, profile_for(plan))
    results = compare(plans, args.iterations, args.warmup, args.rounds, args.seed, backend)
    rows = []
    for name, runs in results.items():
        first, last = runs[-1].loss_ends
        rows.append({"plan": name, "samples_per_s": round(statistics.median(r.samples_per_s for r in runs), 1),
                     "runs_samples_per_s": [round(r.samples_per_s, 1) for r in runs],
                     "loss_first": round(first, 4), "loss_last": round(last, 4),
                     "loss_fell": all(r.loss_fell for r in runs)})
    from tabulate import tabulate

    print(f"{plan.task.name}: {plan.task.topology.world_size} processes, {backend}, global batch "
          f"{plan.task.global_batch_size}, {args.iterations} timed iterations x {args.rounds} rounds (interleaved)")
    print(tabulate([{k: v for k, v in r.items() if k != "runs_samples_per_s"} for r in rows], headers="keys"))
    memory = {name: memory_rows(plans[name], runs[-1]) for name, runs in results.items()}
    print("\nmemory per rank, MiB: the plan's own figures beside what TorchRec allocated for the shards "
          "(weights, optimizer state); the plan's total adds its per-batch buffers, the peak growth "
          "is everything training held at once")
    for name, mem in memory.items():
        print(f"{name}:")
        print(tabulate(mem, headers="keys"))
    if args.out:
        import datetime as dt

        from .cost.profiles import machine_stamp

        write_json_atomic(args.out, {"task": plan.task.name, "backend": backend, "iterations": args.iterations,
                                     "rounds": args.rounds, "measured": MEASURED_DMP, "machine": machine_stamp(),
                                     "date": dt.date.today().isoformat(), "command": command_line(),
                                     "results": rows, "memory_mib": memory,
                                     "runs": {n: [r.to_dict() for r in rs] for n, rs in results.items()}})
    if not all(r["loss_fell"] for r in rows):
        print("error: the loss did not fall", file=sys.stderr)
        return 1
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from .cost.profiles import profile_for
    from .formats import load_plan, write_text_atomic
    from .report_html import render
    from .validate import validate_plan

    plans = []
    for path in args.plans:
        p = load_plan(path)
        validate_plan(p)
        if p.cost is None:  # price it, so every plan in the report has a predicted cost
            priced = argparse.Namespace(**{**vars(args), "profile": profile_for(p, args.profile)})
            p = replace(p, cost=_estimator(priced).estimate(p))
        plans.append(p)
    write_text_atomic(args.out, render(plans))
    print(f"wrote {args.out} ({len(plans)} plan(s))")
    return 0


def add_visits(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--visits", type=int, default=1,
                        help="visits per rank and round, taken in turn with the plan's other ranks (the "
                             "profile's repeats spread over them; the plan is held in memory); 1 times each "
                             "rank in one go, as the cost data was")


def add_calibrate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calibrate", action="store_true",
                        help="measure every rank beside stored ranks like it and express it on the host their "
                             "labels were taken on (neighbour calibration: for a busy machine, where one "
                             "reference divisor is wrong for most ranks; about 20 timings a rank per round)")


def add_refine(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--refine", type=at_least(0), default=0, metavar="N",
                        help="time the plan (and the searcher's runners-up) on this machine's kernels and "
                             "re-polish it against the measured per-rank error, up to N times; keeps the plan "
                             "measured fastest (about a minute a cpu-bench task; not a function of the seed "
                             "alone: the timings are recorded in the plan)")


def add_wait_fit(parser: argparse.ArgumentParser, zero_or_after: str, gate: bool = False) -> None:
    """``--wait-fit``; with ``gate``, also the options of a :class:`~shardplan.cost.fit_gate.FitGate` that
    holds each task to a host fit through it (read back by :func:`fit_gate`)."""
    parser.add_argument("--wait-fit", type=at_least(0, float), default=0.0, metavar="MINUTES",
                        help="before each task, wait up to this long for the machine to reproduce its "
                             f"cost labels (shardplan.cost.fitness); {zero_or_after}; exit 3 when the "
                             "wait runs out (run again to resume)")
    if not gate:
        return
    parser.add_argument("--fit-streak", type=at_least(1), default=1, metavar="N",
                        help="with --wait-fit: start a task only after N fit probes in a row, a spell rather "
                             "than a blip (default %(default)s)")
    parser.add_argument("--fit-after", action="store_true",
                        help="probe again after each task; drop and measure again a task the machine was not "
                             "fit through (the results name the drops)")
    parser.add_argument("--retakes", type=at_least(0), default=2,
                        help="with --fit-after: times a task is measured again before the run exits 3 "
                             "(default %(default)s; run again to resume)")


def add_wait_quiet(parser: argparse.ArgumentParser, what: str) -> None:
    """``--wait-quiet``: the collectors' second chance for a timing the quiet gate failed (collect.timed_row)."""
    parser.add_argument("--wait-quiet", type=at_least(0, float), default=0.0, metavar="SECONDS",
                        help=f"after a {what} the quiet gate still failed on its last attempt, wait up to this long "
                             f"for the reference to read quiet three times in a row, then time the {what} again and "
                             "keep the less disturbed timing (for a guest disturbed in spells; default 0: no wait)")


def fit_gate(args: argparse.Namespace) -> FitGate:
    """The gate :func:`add_wait_fit` (``gate=True``) put on the command line."""
    from .cost.fit_gate import FitGate

    return FitGate(60 * args.wait_fit, args.fit_streak, args.fit_after, args.retakes)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="shardplan", description="Plan how a DLRM's embedding tables are sharded over the ranks of a training "
        "job, priced by cost models learnt from real FBGEMM kernel timings. Start with `shardplan run` (the bundled "
        "default task) or `shardplan plan TASK.json -o PLAN.json`; bad input exits 2 having written nothing.")
    sub = p.add_subparsers(dest="command", required=True)

    def with_profile(sp: argparse.ArgumentParser, model: bool = True, here: bool = False,
                     of_plan: bool = False) -> argparse.ArgumentParser:
        if here:  # a command that measures on this host: by default, the host's own profile
            sp.add_argument("--profile", default=None, help="hardware profile (default: $SHARDPLAN_PROFILE, else "
                            "the profile measured on this host's CPU where one is trained, else "
                            f"{DEFAULT_PROFILE}; `shardplan profiles`)")
        elif of_plan:  # a command that prices given plans: by default, as they were priced
            sp.add_argument("--profile", default=None, help="hardware profile (default: the one that priced the "
                            f"plan, named in its cost block; else {DEFAULT_PROFILE} where it prices the plan's "
                            "device)")
        else:
            sp.add_argument("--profile", default=DEFAULT_PROFILE, help=f"hardware profile (default {DEFAULT_PROFILE})")
        if model:
            sp.add_argument("--model", help="compute-model file (default: the profile's committed one)")
            sp.add_argument("--host-reference-ms", type=_reference_ms, default=None, metavar="MS|auto",
                            help="GPU profiles: price at the host state of a machine whose reference workload "
                                 "runs in this many ms (`shardplan profiles --host-reference` times it there), or "
                                 "auto: time it on this machine's GPU now (default: the state of the profile's "
                                 "collection)")
        return sp

    run = with_profile(sub.add_parser("run", help="plan a task with the default searcher; show predicted "
                                                  "and measured per-rank cost"), here=True)
    run.add_argument("task", nargs="?", default=str(DEFAULT_TASK),
                     help="a shardplan/task@1 file (default: the bundled data/tasks/default.json)")
    run.add_argument("-o", "--out", default="out/plan.json", help="the plan file to write (default %(default)s)")
    run.add_argument("--seed", type=at_least(0), default=0, help=SEED_HELP)
    run.add_argument("--no-measure", dest="measure", action="store_false",
                     help="show the predicted cost only (no timing on this machine's kernels)")
    run.add_argument("--rounds", type=at_least(1), default=1,
                     help="interleaved measurement rounds (each rank's median kept)")
    add_visits(run)
    add_calibrate(run)
    add_refine(run)
    run.set_defaults(func=_cmd_run)

    plan = with_profile(sub.add_parser("plan", help="plan a task"))
    plan.add_argument("task", help="a shardplan/task@1 file")
    plan.add_argument("--searcher", default=None, help="default: the best searcher (see `searchers`)")
    plan.add_argument("--seed", type=at_least(0), default=0, help=SEED_HELP)
    plan.add_argument("--sharding-types", help="comma-separated types the plan may use, e.g. "
                                               "table_wise,column_wise,data_parallel (what gloo runs)")
    plan.add_argument("-o", "--out", required=True, help="the plan file to write (shardplan/plan@1)")
    add_refine(plan)
    plan.set_defaults(func=_cmd_plan)

    ev = with_profile(sub.add_parser("evaluate", help="fill a plan's predicted cost; --measure times it too"),
                      of_plan=True)
    ev.add_argument("plan", help="a shardplan/plan@1 file")
    ev.add_argument("-o", "--out", required=True, help="the plan file to write, its cost block filled")
    ev.add_argument("--measure", action="store_true", help="also time every rank on real FBGEMM")
    ev.add_argument("--rounds", type=at_least(1), default=1,
                    help="interleaved measurement rounds (each rank's median kept)")
    add_visits(ev)
    add_calibrate(ev)
    ev.set_defaults(func=_cmd_evaluate)

    val = sub.add_parser("validate", help="check a plan: tiling, ranks, memory (exit 1 if invalid)")
    val.add_argument("plan", help="a shardplan/plan@1 file")
    val.set_defaults(func=_cmd_validate)

    sub.add_parser("searchers", help="list the searchers").set_defaults(func=_cmd_searchers)
    prof = sub.add_parser("profiles", help="list the hardware profiles and which one this host is")
    prof.add_argument("--probe", action="store_true",
                      help="also re-time a few of this host's profile's stored plan ranks (or --profile's; about "
                           "15 s) and say whether this machine runs them as their labels say")
    prof.add_argument("--host-reference", action="store_true",
                      help="time the reference workload on this machine's GPU, the figure --host-reference-ms "
                           "prices a GPU profile at (with --profile)")
    prof.add_argument("--profile", default=None,
                      help="with --probe: the profile to re-time (default: the one `run` measures with, "
                           "$SHARDPLAN_PROFILE's or this host's); with --host-reference: the GPU profile it is for")
    prof.add_argument("--new", metavar="NAME", help="add a profile of this machine under data/profiles/NAME/ "
                      "(profile.json and a README of what to collect), with --like's protocol and budgets")
    prof.add_argument("--like", metavar="PROFILE", help="with --new: the profile to copy (e.g. cpu-2c, h100)")
    prof.add_argument("--description", help="with --new: one line on the machine (default: said for you)")
    prof.add_argument("--show", metavar="NAME", help="one profile: its protocol, which of its files are there and "
                      "what they hold, and the next command to run")
    prof.set_defaults(func=_cmd_profiles)

    rep = with_profile(sub.add_parser("report", help="self-contained HTML report of one or more plans"),
                       of_plan=True)
    rep.add_argument("plans", nargs="+", help="shardplan/plan@1 files (of one task, to compare them)")
    rep.add_argument("-o", "--out", default="out/report.html",
                     help="the HTML file to write (default %(default)s)")
    rep.set_defaults(func=_cmd_report)

    dmp = sub.add_parser("train-dmp", help="train a DLRM with TorchRec DistributedModelParallel sharded by a "
                                           "plan (one process per rank); report samples/s and the loss")
    dmp.add_argument("plan", help="a shardplan/plan@1 file of table-wise, column-wise or data-parallel shards")
    dmp.add_argument("--iterations", type=int, default=100, help="timed iterations per run")
    dmp.add_argument("--warmup", type=at_least(0), default=5, help="untimed iterations first (default %(default)s)")
    dmp.add_argument("--rounds", type=at_least(1), default=2, help="runs per plan, interleaved")
    dmp.add_argument("--seed", type=at_least(0), default=0, help="the model's initial weights and the batches")
    dmp.add_argument("--backend", choices=["gloo", "nccl"], help="default: gloo on cpu, nccl on cuda")
    dmp.add_argument("--no-torchrec", dest="vs_torchrec", action="store_false",
                     help="do not also train TorchRec's own plan of the task")
    dmp.add_argument("-o", "--out", help="write the results as JSON")
    dmp.set_defaults(func=_cmd_train_dmp)

    serve = sub.add_parser("serve", help="run the REST planning service (uvicorn)")
    serve.add_argument("--host", default="127.0.0.1", help="default loopback only")
    serve.add_argument("--port", type=at_least(0, hi=65535), default=8000, help="default %(default)s")
    serve.add_argument("--profiles", help="comma-separated profiles to load (default: every one that can be "
                       "priced: a trained model, or a GPU profile's published roofline)")
    serve.add_argument("--workers", type=int, default=2, help="planning threads (default 2)")
    serve.add_argument("--max-tables", type=int, default=2000, help="most tables a task may have (default %(default)s)")
    serve.add_argument("--max-world-size", type=int, default=1024,
                       help="most ranks a task may have (default %(default)s)")
    serve.add_argument("--max-body-bytes", type=int, default=16 * 2**20,
                       help="largest request body (default %(default)s); a larger one gets 413")
    serve.add_argument("--max-budget-s", type=float, default=120.0, help="longest a planning request may run")
    serve.add_argument("--log-level", default="info", help="uvicorn's (default %(default)s)")
    serve.set_defaults(func=_cmd_serve)

    bench = with_profile(sub.add_parser("bench", help="every searcher on every task of a suite, measured"))
    bench.add_argument("--suite", default="data/tasks/cpu-bench", help="a folder of task files (default %(default)s)")
    bench.add_argument("--searchers", default="all", help="comma-separated names, or all")
    bench.add_argument("--rounds", type=at_least(1), default=1,
                       help="interleaved measurement rounds per task (each rank's median kept)")
    add_visits(bench)
    bench.add_argument("--seed", type=at_least(0), default=0, help=SEED_HELP)
    bench.add_argument("--out", default="bench/results", help="folder of the results files (default %(default)s)")
    bench.add_argument("--name", help="result file stem (default bench-<profile>-<suite>)")
    bench.add_argument("--limit", type=at_least(1), help="only the first N tasks of the suite (sorted by name)")
    bench.add_argument("--tasks", default="*.json", help="file-name pattern of the suite's tasks to run")
    add_wait_fit(bench, "0 measures at once and records the probe", gate=True)
    bench.set_defaults(func=_cmd_bench)

    train = with_profile(sub.add_parser("train", help="train the compute-cost model from committed data"),
                         model=False)
    train.add_argument("--epochs", type=at_least(1), default=300, help="passes over the data (default %(default)s)")
    train.add_argument("--seed", type=at_least(0), default=0, help="weights' initialisation and batch order")
    train.add_argument("--out", type=Path, default=None,
                       help="folder for the model, its report and reference.json (default: the profile's own)")
    train.add_argument("--random-level", action=argparse.BooleanOptionalAction, default=True,
                       help="learn the random shard sets' level apart from whole plan ranks' and predict the "
                            "latter (default; needs the profile's plan ranks)")
    train.add_argument("--split-batches", action=argparse.BooleanOptionalAction, default=True,
                       help="price a rank's shards of each batch size (data-parallel replicas: the local batch) "
                            "as an op of their own and add them, as they run (default)")
    train.add_argument("--context-totals", action=argparse.BooleanOptionalAction, default=False,
                       help="let the set context read the rank's totals (floats looked up and updated, bytes "
                            "held) besides its mean shard; a candidate, not the committed model's recipe")
    # shardplan.cost.model.CONTEXT_CODE_MODES, spelt out: that module loads torch, too slow for --help
    train.add_argument("--context-code", choices=("free", "none", "banded"), default="free",
                       help="how the set context reads the mean shard code: free (default), none (with "
                            "--context-totals: the totals and shard count alone), banded (a second network of it "
                            "moves the log factors at most CODE_BAND either way); the last two candidates")
    train.add_argument("--decompositions", action=argparse.BooleanOptionalAction, default=None,
                       help="also learn compute-decompositions.parquet's ratios of sets over their shards alone "
                            "(shardplan collect decompositions); default: the profile's train_decompositions "
                            "(true on cpu-2c-nested since session 58, a candidate on the others)")
    train.add_argument("--hot-mixes", action=argparse.BooleanOptionalAction, default=False,
                       help="also learn compute-hot-mixes.parquet's neighbour-calibrated sets as plan ranks "
                            "(shardplan collect hot-mixes); a candidate")
    train.add_argument("--crowded-mixes", action=argparse.BooleanOptionalAction, default=False,
                       help="also learn compute-crowded-mixes.parquet's neighbour-calibrated sets of 8-30 whole "
                            "tables as plan ranks (shardplan collect crowded-mixes); a candidate")
    train.add_argument("--moderate-mixes", action=argparse.BooleanOptionalAction, default=False,
                       help="also learn compute-moderate-mixes.parquet's neighbour-calibrated sets of 8-30 whole "
                            "tables that fit the cache one by one and not together, as plan ranks (shardplan "
                            "collect moderate-mixes); a candidate")
    train.add_argument("--long-ranks", action=argparse.BooleanOptionalAction, default=False,
                       help="plan ranks count more the longer they are (once more per 10 ms, up to 3 times "
                            "their weight): a plan's cost is its slowest rank's; a candidate")
    train.add_argument("--slowdown-window-s", type=at_least(1, float), default=None, metavar="SECONDS",
                       help="divide each label by the median slowdown of the timings within half this many "
                            "seconds of it, in place of the profile's slowdown_window_s; a candidate")
    train.add_argument("--retimes", action=argparse.BooleanOptionalAction, default=False,
                       help="label each random set and plan rank re-timed under the profile's retimes/ folder "
                            "(shardplan collect retime) by the median of its timings; a candidate")
    train.add_argument("--data-dir", metavar="FOLDER", default=None,
                       help="learn from this data folder in place of the profile's (e.g. one "
                            "bench/targeted_data.py wrote, with a targeted collection among the random sets); "
                            "needs --out")
    train.add_argument("--init", metavar="PROFILE", default=None,
                       help="start from that profile's committed model (same device and recipe): a kind paired "
                            "against it (shardplan collect paired) learns how it differs")
    train.add_argument("--huber-delta", type=at_least(0.001, float), default=None, metavar="LOG_MS",
                       help="count each labelled set's log error squared only up to this residual and linearly "
                            "past it (0.1: about 10%%), so labels a busy neighbour slowed pull the fit less; "
                            "default: squared throughout; a candidate")
    # 8: shardplan.cost.model.MAX_COMPONENTS, spelt out for --help's sake, as the modes above
    train.add_argument("--components", type=at_least(1, int, 8), default=1, metavar="K",
                       help="time parts per shard and head, each slowed by the set at a factor of its own "
                            "(default 1: one factor for the whole set; more, a candidate)")
    train.set_defaults(func=_cmd_train)

    tp = with_profile(sub.add_parser("train-policy", help="train the rl searcher's placement policy against "
                                                          "the cost model (resumable)"))
    tp.add_argument("--updates", type=at_least(1), default=300, help="policy-gradient updates (default %(default)s)")
    tp.add_argument("--seed", type=at_least(0), default=0, help="the training tasks drawn and the policy's start")
    tp.add_argument("--out", help="default data/profiles/<profile>/rl-policy.json")
    tp.set_defaults(func=_cmd_train_policy)

    mt = with_profile(sub.add_parser("make-tasks", help="generate a benchmark task suite"), model=False)
    mt.add_argument("--suite", default="cpu-bench", help="the tasks' name prefix (default %(default)s)")
    mt.add_argument("--count", type=at_least(1), default=30, help="tasks to write (default %(default)s)")
    mt.add_argument("--seed", type=at_least(0), default=0, help="the same seed writes the same suite")
    mt.add_argument("--pools", default="meta_synthetic", help=POOLS_HELP)
    mt.add_argument("--tables", default="10,60", help="MIN,MAX tables per task")
    mt.add_argument("--world-sizes", default="2,4,8", help="ranks a task may have, one drawn per task (default "
                                                          "%(default)s)")
    mt.add_argument("--ranks-per-host", type=at_least(1),
                    help="ranks on each host, splitting a task's ranks into hosts (default: one host)")
    mt.add_argument("--oversize-every", type=at_least(0), default=6,
                    help="every N-th task has a table larger than one rank (0: none)")
    mt.add_argument("--batch-size-per-rank", type=at_least(1),
                    help="default: on a CPU profile sized so one rank measures in ~1 s; on a GPU profile one of "
                         "the global batches its cost data was timed at, shared by the ranks")
    mt.add_argument("--out", default="data/tasks/cpu-bench", help="folder to write to (default %(default)s)")
    mt.set_defaults(func=_cmd_make_tasks)

    collect = sub.add_parser("collect", help="collect cost data on real kernels")
    csub = collect.add_subparsers(dest="what", required=True)
    cc = with_profile(csub.add_parser("compute", help="time random shard sets as one FBGEMM TBE op "
                                                      "(resumable)"), model=False)
    cc.add_argument("--samples", type=at_least(1), default=6000, help="total samples wanted for this seed")
    cc.add_argument("--seed", type=at_least(0), default=0, help="sample i of a seed is always the same set")
    cc.add_argument("--pools", default=",".join(COLLECT_POOLS), help=POOLS_HELP)
    cc.add_argument("--optimizer", choices=OPTIMIZERS, default="sgd",
                    help="the fused optimizer the backward applies (default %(default)s; not adam on a CPU)")
    cc.add_argument("--dtype", choices=tuple(DTYPE_BYTES), default="fp32",
                    help="the weights' type (default %(default)s); a profile's data holds one optimizer and "
                         "one dtype, which the model it trains then prices")
    cc.add_argument("--repeats", type=at_least(1), default=None, help="timed iterations (default: the profile's)")
    cc.add_argument("--min-shards", type=at_least(1), default=1, help="fewest shards a set holds (default %(default)s)")
    cc.add_argument("--max-shards", type=at_least(1), default=15, help="most shards a set holds (default %(default)s)")
    cc.add_argument("--min-table-rows", type=int, default=0,
                    help="draw only the pools' tables of at least this many rows (a targeted collection of "
                         "the large tables, which the random sets' budgets rarely admit at high pooling)")
    cc.add_argument("--min-pooling", type=float, default=0.0,
                    help="draw only the pools' tables of at least this mean pooling factor")
    cc.add_argument("--min-zipf", type=float, default=0.0,
                    help="draw only the pools' tables of at least this Zipf exponent (skewed ids: few rows hit)")
    cc.add_argument("--min-cols", type=int, default=0,
                    help="draw only dims of at least this many columns (dims are re-drawn per shard; with "
                         "--min-table-rows/--min-pooling, sets whose rows touched leave the cache)")
    cc.add_argument("--row-share", type=float, default=ROW_SHARE,
                    help=f"share of shards cut to a row range (default {ROW_SHARE}; a collection that changes "
                         "any drawing flag takes another --seed than the default collection's)")
    cc.add_argument("--row-splits", default=",".join(map(str, ROW_SPLITS)),
                    help="the parts a cut table's rows are split into, one drawn per cut shard (default %(default)s)")
    cc.add_argument("--replica-share", type=float, default=0.0,
                    help="share of sets that also run a data-parallel op: 1 to 5 whole small tables fed the local "
                         "batch (the set's global batch over a world drawn from --replica-worlds), as the ranks "
                         "of plans with data-parallel tables do (default 0)")
    cc.add_argument("--replica-worlds", default=",".join(map(str, REPLICA_WORLDS)),
                    help="world sizes the global batch is divided by for the local batch (default %(default)s)")
    cc.add_argument("--replica-max-rows", type=int, default=REPLICA_MAX_ROWS,
                    help="most rows a replicated table has (default %(default)s; drawn from the whole pool, "
                         "whatever --min-table-rows says)")
    cc.add_argument("--batch-sizes", help="comma-separated global batches to draw a set at (default the "
                                          "profile's collection batches; small ones with many shards price the "
                                          "op's fixed costs)")
    cc.add_argument("--max-seconds", type=at_least(0, float), default=None,
                    help="stop after this long, keeping what was collected (run again to resume)")
    add_wait_quiet(cc, "set")
    cc.add_argument("--out", help="parquet file (default data/profiles/<profile>/compute.parquet, "
                                  "compute-large.parquet when --max-shards > 15)")
    cc.set_defaults(func=_cmd_collect_compute)
    cr = with_profile(csub.add_parser("ranks", help="plan a suite with several searchers and time every rank "
                                                    "(whole-rank samples; resumable)"))
    cr.add_argument("--suite", default="data/tasks/cpu-train",
                    help="task files to plan (default %(default)s): their shapes, run with the optimizer and "
                         "dtype of the profile's data")
    cr.add_argument("--searchers", default="neuroshard,neuroshard-tw,greedy-cost,torchrec,greedy-lookup,"
                                           "greedy-size,round-robin,random",
                    help="comma-separated searchers whose plans of each task are timed (default %(default)s)")
    cr.add_argument("--plans", help="a folder of plan files made elsewhere: time their ranks instead of planning "
                                    "(--suite and --searchers unused; each plan names its searcher)")
    cr.add_argument("--round", type=at_least(0), default=0, help="DreamShard loop round: plans of a retrained model "
                                                         "are new data (default 0)")
    cr.add_argument("--out", help="parquet file (default data/profiles/<profile>/compute-ranks.parquet, "
                                  "compute-plan-groups.parquet with --visits)")
    cr.add_argument("--visits", type=at_least(1), default=1,
                    help="above 1: time each task's plans together as the bench does (turns by visit, one "
                         "divisor per task), for within-task relative labels (source plan-group)")
    cr.add_argument("--rounds", type=at_least(1), default=2, help="interleaved rounds with --visits (default 2)")
    add_wait_fit(cr, "then accept a steady slowdown up to 2x, as plan measurements do; 0 (default) "
                     "gates each rank on the reference alone (within 1.2x of quiet)")
    add_wait_quiet(cr, "rank")
    cr.set_defaults(func=_cmd_collect_ranks)
    ct = with_profile(csub.add_parser("retime", help="time every shard set of a cost-data file again, "
                                                     "row by row (repeatability; resumable)"), model=False)
    ct.add_argument("src", metavar="SRC", help="a parquet file of shardplan collect")
    ct.add_argument("--out", required=True, help="parquet file for the new timings (with src_row)")
    add_wait_quiet(ct, "set")
    ct.set_defaults(func=_cmd_collect_retime)
    cp = with_profile(csub.add_parser("paired", help="label another optimizer or weight type from a base profile's "
                                                     "labels: each set timed in both kinds in turns (resumable)"),
                      model=False)
    cp.add_argument("--base", required=True, help="the profile whose labelled rows are paired (this host's)")
    cp.add_argument("--optimizer", choices=OPTIMIZERS, required=True, help="the new kind's fused optimizer")
    cp.add_argument("--dtype", choices=tuple(DTYPE_BYTES), default="fp32",
                    help="its weights' type (default %(default)s)")
    cp.add_argument("--src", help="the base's cost-data file (default data/profiles/<base>/compute.parquet; "
                                  "its compute-ranks.parquet for plan ranks)")
    cp.add_argument("--sets", type=at_least(1), default=None,
                    help="rows wanted, taken in a seeded order (default: every timed row of --src)")
    cp.add_argument("--visits", type=at_least(1), default=2, help="visits per kind and set (default %(default)s)")
    cp.add_argument("--held-out", action="store_true",
                    help="of those rows, only the ones training holds out: pair them again (more --visits, "
                         "another --out) to check the labels a model is scored against")
    cp.add_argument("--wait-fit", type=at_least(0, float), default=None, metavar="MINUTES",
                    help="probe the base profile's fitness before the first row and every 50, waiting up to this "
                         "long while the host is unfit (0: record, never wait), and record it on each row: the "
                         "ratio moves with the host's level (exit 3 when a wait runs out; run again to resume)")
    cp.add_argument("--max-seconds", type=at_least(0, float), default=None,
                    help="stop after this long, keeping what was collected (run again to resume)")
    cp.add_argument("--out", help="parquet file (default: --src's name in data/profiles/<profile>/)")
    cp.set_defaults(func=_cmd_collect_paired)
    cd = with_profile(csub.add_parser("decompositions", help="time trained-on plan ranks whole and shard by shard "
                                                             "in the same repetitions (resumable)"), model=False)
    cd.add_argument("--sets", type=at_least(1), default=400, help="total decompositions wanted")
    cd.add_argument("--reps", type=at_least(1), default=5, help="repetitions in which every op takes its turn")
    cd.add_argument("--src", help="plan-rank file (default data/profiles/<profile>/compute-ranks.parquet)")
    cd.add_argument("--max-seconds", type=at_least(0, float), default=None,
                    help="stop after this long, keeping what was collected (run again to resume)")
    cd.add_argument("--by-batch", action="store_true",
                    help="instead: every plan rank of two batch sizes (data-parallel replicas beside sharded "
                         "tables), whole and each batch's op alone, held-out ranks too; for reading which op a "
                         "model misprices, never for training")
    cd.add_argument("--skip", action="append", default=[], metavar="FILE",
                    help="leave out the source rows this decomposition file already holds (repeatable): fresh "
                         "sets of the same source, collected beside an earlier file")
    cd.add_argument("--out", help="parquet file (default data/profiles/<profile>/compute-decompositions.parquet; "
                                  "compute-batch-parts.parquet with --by-batch)")
    cd.set_defaults(func=_cmd_collect_decompositions)
    for recipe, about, excluded in (
            ("hot", "plan-rank-like sets around a large hot table", "data/tasks/unseen-a,data/tasks/unseen-b"),
            ("crowded", "sets of 8-30 whole tables, half of them large",
             "data/tasks/unseen-a,data/tasks/unseen-b,data/tasks/unseen-c"),
            ("moderate", "sets of 8-30 whole tables, each touching at most 4 MB of rows a batch",
             "data/tasks/unseen-a,data/tasks/unseen-b,data/tasks/unseen-c,data/tasks/unseen-d")):
        ch = with_profile(csub.add_parser(f"{recipe}-mixes", help=f"time {about} beside labelled neighbours "
                                                                  "(calibrated labels; resumable)"),
                          model=False)
        ch.add_argument("--sets", type=at_least(1), default=200, help="total sets wanted for this seed")
        ch.add_argument("--seed", type=at_least(0), default=0, help="set i of a seed is always the same set")
        ch.add_argument("--pools", default=",".join(COLLECT_POOLS), help=POOLS_HELP)
        # the hot mixes were drawn before unseen-c existed; their command keeps the pools they were drawn from
        ch.add_argument("--exclude-suites", default=excluded,
                        help="suites whose tables are left out of the pools (held-out checks never see a label)")
        ch.add_argument("--max-seconds", type=at_least(0, float), default=None,
                        help="stop after this long, keeping what was collected (run again to resume)")
        ch.add_argument("--out", help=f"parquet file (default data/profiles/<profile>/compute-{recipe}-mixes.parquet)")
        ch.set_defaults(func=_cmd_collect_hot_mixes, recipe=recipe)
    cm = with_profile(csub.add_parser("comm", help="measure gloo all-to-all and fit the comm model"),
                      model=False)
    cm.add_argument("--world-sizes", default="2,3,4", help="processes per all-to-all (default %(default)s)")
    cm.add_argument("--configs", type=at_least(1), default=40, help="random uneven splits per world size")
    cm.set_defaults(func=_cmd_collect_comm)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return exit_status(lambda: args.func(args))


if __name__ == "__main__":
    sys.exit(main())
