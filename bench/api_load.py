"""Load on the REST service: N concurrent planning requests for 60-table tasks.

Starts ``shardplan serve`` on loopback, sends all requests at once (each a
different 60-table task drawn like the benchmark tasks, 2/4/8 ranks), and
reports how many succeeded and the latency distribution. Latency includes the
wait for a planning thread: with 2 workers on 2 cores, the 50th request waits
for the 48 before it. Writes ``bench/results/api-load-<searcher>.{md,json}``.

    .venv/bin/python bench/api_load.py --requests 50 --searcher neuroshard
"""
from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import sys
import time
from pathlib import Path

import httpx
import numpy as np

from shardplan.argtypes import at_least
from shardplan.api.launch import running_service
from shardplan.cost.profiles import get_profile, load1, machine_stamp
from shardplan.errors import exit_status
from shardplan.formats import task_to_dict
from shardplan.pools import load_pool
from shardplan.taskgen import generate_task

ROOT = Path(__file__).resolve().parents[1]


def tasks(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    pool, profile = load_pool("meta_synthetic"), get_profile("cpu-2c")
    return [task_to_dict(generate_task(rng, pool, f"load-{i:02d}", profile, num_tables=(60, 60)))
            for i in range(n)]


async def fire(url: str, bodies: list[dict], searcher: str) -> list[tuple[int, float, str]]:
    async with httpx.AsyncClient(timeout=3600) as client:
        async def one(body: dict) -> tuple[int, float, str]:
            t0 = time.perf_counter()
            r = await client.post(url + "/v1/plans", params={"searcher": searcher}, json=body)
            return r.status_code, time.perf_counter() - t0, "" if r.status_code == 200 else r.text[:200]
        return await asyncio.gather(*(one(b) for b in bodies))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=at_least(1), default=50)
    ap.add_argument("--searcher", default="neuroshard")
    ap.add_argument("--workers", type=at_least(1), default=2)
    ap.add_argument("--seed", type=at_least(0), default=0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()

    with running_service("--workers", str(args.workers), "--max-budget-s", "3600") as url:
        bodies = tasks(args.requests, args.seed)
        load_before = load1()
        t0 = time.perf_counter()
        results = asyncio.run(fire(url, bodies, args.searcher))
        wall = time.perf_counter() - t0

    lat = np.array([r[1] for r in results])
    ok = sum(r[0] == 200 for r in results)
    row = {"searcher": args.searcher, "requests": args.requests, "tables_per_task": 60,
           "workers": args.workers, "succeeded": ok, "failed": [r for r in results if r[0] != 200][:5],
           "p50_s": round(float(np.percentile(lat, 50)), 2), "p99_s": round(float(np.percentile(lat, 99)), 2),
           "max_s": round(float(lat.max()), 2), "wall_s": round(wall, 2),
           "throughput_plans_per_s": round(ok / wall, 2),
           "date": dt.date.today().isoformat(), "machine": machine_stamp(),
           "load_before": load_before, "load_after": load1(),
           "command": f"bench/api_load.py --requests {args.requests} --searcher {args.searcher} "
                      f"--workers {args.workers} --seed {args.seed}"}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"api-load-{args.searcher}"
    stem.with_suffix(".json").write_text(json.dumps(row, indent=2) + "\n")
    table = ("| searcher | requests | succeeded | p50 s | p99 s | wall s | plans/s |\n"
             "| --- | --- | --- | --- | --- | --- | --- |\n"
             f"| {args.searcher} | {args.requests} | {ok} | {row['p50_s']} | {row['p99_s']} | {row['wall_s']} | "
             f"{row['throughput_plans_per_s']} |\n")
    stem.with_suffix(".md").write_text(
        f"# REST service under load ({row['date']})\n\n{args.requests} concurrent `POST /v1/plans`, 60-table "
        f"tasks, {args.workers} planning threads, on {row['machine']['cpu_model']} ({row['machine']['cpu_cores']} "
        f"cores). Latency includes queueing for a planning thread.\n\n{table}\n`{row['command']}`\n")
    print(table)


if __name__ == "__main__":
    sys.exit(exit_status(main))
