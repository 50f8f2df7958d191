"""Planning at scale: all 856 tables of the Meta-like pool on 128 ranks (predicted costs only).

Times shardplan's searchers and TorchRec's planner on the same task and writes
``bench/results/scale-<profile>.md``. Rows are capped at the profile's
``max_rows`` (the cost data's range), dims drawn as in the benchmark tasks.

    .venv/bin/python bench/scale.py
"""
from __future__ import annotations

import argparse
import datetime as dt
import shlex
import signal
import sys
import time
from pathlib import Path

import numpy as np

from shardplan.argtypes import at_least
from shardplan.cost.estimator import load_estimator
from shardplan.cost.profiles import get_profile, machine_stamp
from shardplan.domain import Table, Task, Topology
from shardplan.errors import InputError, exit_status
from shardplan.formats import write_text_atomic
from shardplan.memory import GB, table_bytes
from shardplan.pools import load_pool
from shardplan.search import DEFAULT_SEARCHER, get_searcher
from shardplan.taskgen import TASK_DIMS


def scale_task(profile_name: str, world: int, hosts: int, seed: int = 0) -> Task:
    profile = get_profile(profile_name)
    rng = np.random.default_rng(seed)
    tables = tuple(Table(t.name, min(t.num_embeddings, profile.max_rows), int(rng.choice(TASK_DIMS)),
                         t.pooling_factor, t.zipf_alpha) for t in load_pool("meta_synthetic"))
    probe = Task("scale", tables, Topology(world, world // hosts), batch_size_per_rank=128)
    total = sum(table_bytes(probe, t) for t in tables)
    cap = max(total / world * 1.3, max(table_bytes(probe, t) for t in tables) * 1.02)
    return Task("scale-856x%d" % world, tables,
                Topology(world, world // hosts, profile.device, round(cap / GB, 3)), batch_size_per_rank=128)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--ranks", type=at_least(1), default=128)
    ap.add_argument("--hosts", type=at_least(1), default=16)
    ap.add_argument("--searchers", default=f"{DEFAULT_SEARCHER},neuroshard-tw,greedy-lookup,torchrec")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--limit-s", type=at_least(1), default=300, help="stop a searcher after this many seconds")
    args = ap.parse_args()
    task = scale_task(args.profile, args.ranks, args.hosts)
    est = load_estimator(args.profile)
    rows = []
    def too_long(*_):
        raise TimeoutError

    signal.signal(signal.SIGALRM, too_long)
    for name in args.searchers.split(","):
        t0 = time.perf_counter()
        signal.alarm(args.limit_s)
        try:
            plan = get_searcher(name).plan(task, est)
            rows.append((name, time.perf_counter() - t0, f"{plan.cost.max_ms:.2f}", f"{plan.cost.imbalance:.3f}"))
        except InputError as e:
            rows.append((name, time.perf_counter() - t0, "-", f"could not plan: {e}"))
        except TimeoutError:
            rows.append((name, time.perf_counter() - t0, "-", f"stopped: no plan within {args.limit_s} s"))
        finally:
            signal.alarm(0)
        print(rows[-1])
    md = [f"# Planning {len(task.tables)} tables on {args.ranks} ranks ({args.hosts} hosts), profile `{args.profile}`",
          "", f"Command: `.venv/bin/python bench/scale.py {shlex.join(sys.argv[1:])}`; date "
          f"{dt.date.today()}; {machine_stamp()['cpu_model']}, {machine_stamp()['cpu_cores']} cores. "
          f"Seconds are wall-clock planning time (a searcher is stopped after {args.limit_s} s; they include "
          "validation and the final predicted-cost "
          "evaluation); costs are predicted by the neural model plus the comm model.", "",
          "| searcher | planning seconds | predicted plan cost (ms) | predicted imbalance |",
          "| --- | --- | --- | --- |"]
    md += [f"| {n} | {s:.2f} | {c} | {i} |" for n, s, c, i in rows]
    write_text_atomic(Path(args.out) / f"scale-{args.profile}.md", "\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    sys.exit(exit_status(main))
