"""Does the rl policy transfer? Predicted plan cost on tasks of tables it never saw, and larger ones.

The policy trained on tasks drawn from the even half of the Meta-like pool with
10 to 60 tables. Here: tasks from the odd half (unseen tables) with 10 to 60
tables, and with 100 to 200 tables (more than training saw), 2/4/8 ranks; each
planned by ``rl`` (greedy decoding alone, and with 8 samples), ``neuroshard-tw``
(the greedy grid) and ``greedy-cost``. Costs are the cost model's predictions
(no measurement), so the comparison is of search quality under one model.
Also times planning a 60-table, 8-rank task. Writes
``bench/results/rl-transfer-<profile>.md``.

    .venv/bin/python bench/rl_transfer.py
    .venv/bin/python bench/rl_transfer.py --profile h100 --policy /tmp/candidate.json --out /tmp  # a candidate
"""
from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from shardplan.argtypes import at_least
from shardplan.cost.estimator import load_estimator
from shardplan.cost.profiles import get_profile, machine_stamp
from shardplan.errors import InputError, exit_status
from shardplan.formats import write_text_atomic
from shardplan.pools import load_pool
from shardplan.search import get_searcher
from shardplan.search.rl import RLSearcher
from shardplan.taskgen import generate_task


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--tasks", type=at_least(1), default=12, help="per group")
    ap.add_argument("--policy", default=None, help="an rl policy file (default: the profile's committed one), to "
                    "score a candidate before it replaces that")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    est = load_estimator(args.profile)
    profile = get_profile(args.profile)
    unseen = load_pool("meta_synthetic")[1::2]
    policy = args.policy
    policy_name = f"`{policy}`" if policy else "the profile's committed `rl-policy.json`"
    searchers = {"rl (greedy decoding)": RLSearcher(samples=0, policy_path=policy),
                 "rl": RLSearcher(samples=8, policy_path=policy),
                 "neuroshard-tw": get_searcher("neuroshard-tw"), "greedy-cost": get_searcher("greedy-cost")}
    lines = [f"# rl transfer on `{args.profile}` ({dt.date.today()}, {machine_stamp()['cpu_model']})", "",
             "Predicted plan cost (the neural model's), geometric mean over tasks of each searcher's cost over "
             "`neuroshard-tw`'s; planning seconds median. Tasks drawn from the odd half of the Meta-like pool "
             "(the policy trained on the even half).", "",
             f"Policy: {policy_name}.", "",
             "| tasks | searcher | cost / neuroshard-tw | planning s (median) |", "| --- | --- | --- | --- |"]
    for label, sizes, seed in (("unseen tables, 10-60", (10, 60), 501), ("unseen tables, 100-200", (100, 200), 502)):
        rng = np.random.default_rng(seed)
        costs: dict[str, list[float]] = {n: [] for n in searchers}
        secs: dict[str, list[float]] = {n: [] for n in searchers}
        for i in range(args.tasks):
            task = generate_task(rng, unseen, f"t{i}", profile, num_tables=sizes)
            try:
                plans = {n: s.plan(task, est) for n, s in searchers.items()}
            except InputError:
                continue
            for n, p in plans.items():
                costs[n].append(p.cost.max_ms / plans["neuroshard-tw"].cost.max_ms)
                secs[n].append(p.search["seconds"])
        for n in searchers:
            gm = float(np.exp(np.mean(np.log(costs[n])))) if costs[n] else float("nan")
            lines.append(f"| {label} ({len(costs[n])}) | {n} | {gm:.3f} | {statistics.median(secs[n]):.3f} |")
    rng = np.random.default_rng(60)
    task = generate_task(rng, unseen, "t60x8", profile, num_tables=(60, 60), world_sizes=(8,))
    t0 = time.perf_counter()
    RLSearcher(samples=8, policy_path=policy).plan(task, est)
    lines += ["", f"Planning one 60-table, 8-rank task with `rl` (8 samples): {time.perf_counter() - t0:.3f} s "
              "(policy load included).", "",
              f"Command: `.venv/bin/python bench/rl_transfer.py --profile {args.profile} --tasks {args.tasks}"
              f"{f' --policy {policy}' if policy else ''}`"]
    write_text_atomic(Path(args.out) / f"rl-transfer-{args.profile}.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(exit_status(main))
