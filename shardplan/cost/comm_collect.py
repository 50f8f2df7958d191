"""Measuring real all-to-all on this machine: torch.distributed over gloo.

``world_size`` processes on loopback each own a random, uneven split of bytes
to every peer (as plans produce: a rank holding big tables sends more), run
``all_to_all_single`` after a barrier, and time it; medians of repeats per
configuration. Rows: world size, the rank's bytes sent and received, ms.
Resumable: configurations already in the output file are skipped.
"""
from __future__ import annotations

import datetime as _dt
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist
from tqdm import tqdm

from ..processes import spawn_ranks
from .collect import append_rows
from .profiles import Profile, load1, machine_stamp


def _worker(rank: int, world: int, port: int, splits: np.ndarray, repeats: int, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    results = []
    for config in range(splits.shape[0]):
        send = splits[config, rank]  # floats to each peer
        recv = splits[config, :, rank]
        inp = torch.ones(int(send.sum()), dtype=torch.float32)
        out = torch.empty(int(recv.sum()), dtype=torch.float32)
        times = []
        for i in range(2 + repeats):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_to_all_single(out, inp, output_split_sizes=recv.tolist(), input_split_sizes=send.tolist())
            t = (time.perf_counter() - t0) * 1e3
            if i >= 2:
                times.append(t)
        results.append((config, float((send.sum() - send[rank]) * 4), float((recv.sum() - recv[rank]) * 4),
                        statistics.median(times)))
    np.save(os.path.join(out_dir, f"rank{rank}.npy"), np.array(results))
    dist.destroy_process_group()


def random_splits(rng: np.random.Generator, world: int, n: int) -> np.ndarray:
    """``[n, world, world]`` floats rank i sends rank j: per-rank load from log-uniform 1 KB..16 MB per peer."""
    per_rank = np.exp(rng.uniform(np.log(256), np.log(4 * 2**20), size=(n, world, 1)))
    jitter = rng.uniform(0.5, 1.5, size=(n, world, world))
    return np.maximum(1, (per_rank * jitter)).astype(np.int64)


def collect_comm(profile: Profile, out: Path, world_sizes: tuple[int, ...] = (2, 3, 4),
                 configs_per_world: int = 40, repeats: int = 5, seed: int = 0) -> pd.DataFrame:
    existing = pd.read_parquet(out) if out.exists() else pd.DataFrame()
    stamp = {"profile": profile.name, **machine_stamp(), "torch": torch.__version__, "backend": "gloo"}
    for world in tqdm(world_sizes, desc=f"collect comm [{profile.name}]"):
        if len(existing) and (existing["world_size"] == world).any():
            continue
        splits = random_splits(np.random.default_rng([seed, world]), world, configs_per_world)
        before = load1()
        with tempfile.TemporaryDirectory() as tmp:
            spawn_ranks(_worker, world, splits, repeats, tmp)
            rows = []
            for rank in range(world):
                for config, sent, received, ms in np.load(os.path.join(tmp, f"rank{rank}.npy")):
                    rows.append({"world_size": world, "config": int(config), "rank": rank,
                                 "send_bytes": sent, "recv_bytes": received, "ms": ms})
        df = pd.DataFrame(rows).assign(load1_before=before, load1_after=load1(),
                                       date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                                       **stamp)
        out.parent.mkdir(parents=True, exist_ok=True)
        existing = append_rows(existing, df, out)
    return existing
