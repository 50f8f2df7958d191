"""Benchmark tasks in the spirit of NeuroShard's: random table mixes, dims, ranks, memory caps.

A task draws 10 to 60 tables from a pool, gives each a dim from
{4, 8, 16, 32, 64, 128}, picks 2, 4 or 8 ranks, and sets a per-rank memory cap
tight enough that placement matters: the mean share of the tables' memory
times a slack in [1.15, 1.6], but never below the largest table (except in
``oversize`` tasks: 8 ranks (or the sizes over 8 asked for), 10 to 24 tables, one of them 1M x 128 and larger
than a rank's memory, so that it must be split by rows). For a profile whose cost data covers smaller tables
(``cpu-2c``: 1M rows), row counts are capped at the profile's ``max_rows``, and
the batch is chosen so that one rank's measurement takes about a second.
On a GPU profile the global batch is one of those its cost data was timed
at (16,384 to 131,072: a CPU-sized batch sits below every GPU sample, where
each rank costs its launches whatever it holds, and the `rl` searcher's
policy learnt nothing from such tasks); a suite may give its own instead.
"""
from __future__ import annotations

import numpy as np

from .cost.profiles import Profile
from .domain import Table, Task, Topology
from .memory import GB, table_bytes

TASK_DIMS = (4, 8, 16, 32, 64, 128)
# Lookup work (ids x columns) per rank per iteration that one rank's measurement is sized to.
TARGET_RANK_LOOKUP_FLOATS = 1.2e7
# Raised whenever generate_task draws other tasks from the same seed (2: GPU profiles' batches), so that
# work resumed over generated tasks (the rl policy's checkpoint) does not mix two recipes.
TASK_RECIPE = 2


def generate_task(rng: np.random.Generator, pool: list[Table], name: str, profile: Profile,
                  num_tables: tuple[int, int] = (10, 60), world_sizes: tuple[int, ...] = (2, 4, 8),
                  oversize: bool = False, batch_size_per_rank: int | None = None,
                  ranks_per_host: int | None = None, optimizer: str = "sgd", dtype: str = "fp32") -> Task:
    """One task drawn by ``rng``. ``ranks_per_host`` (default: every rank on one host) splits the ranks
    into hosts of that many; each of ``world_sizes`` must then be a multiple of it. The task trains with
    ``optimizer`` and ``dtype``, and its memory cap is drawn over the bytes they hold (weights and state)."""
    if ranks_per_host is not None and any(w % ranks_per_host for w in world_sizes):
        raise ValueError(f"world sizes {world_sizes} are not all multiples of {ranks_per_host} ranks per host")
    if oversize:  # few tables over many ranks, so one big table can outgrow a rank
        num_tables, world_sizes = (10, 24), tuple(w for w in world_sizes if w > 8) or (8,)
    n = int(rng.integers(num_tables[0], num_tables[1] + 1))
    picks = rng.choice(len(pool), size=min(n, len(pool)), replace=False)
    tables = []
    for i, k in enumerate(sorted(picks)):
        src = pool[int(k)]
        tables.append(Table(name=f"t{i:02d}_{src.name}", num_embeddings=min(src.num_embeddings, profile.max_rows),
                            embedding_dim=int(rng.choice(TASK_DIMS)), pooling_factor=src.pooling_factor,
                            zipf_alpha=src.zipf_alpha))
    if oversize:
        big = tables[0]
        tables[0] = Table(big.name, profile.max_rows, 128, big.pooling_factor, big.zipf_alpha)
    world = int(rng.choice(world_sizes))
    work = sum(t.pooling_factor * t.embedding_dim for t in tables)  # lookup floats per sample
    if batch_size_per_rank:
        batch = batch_size_per_rank
    elif profile.device == "cpu":
        batch = int(2 ** np.clip(np.round(np.log2(TARGET_RANK_LOOKUP_FLOATS / max(work, 1.0))), 6, 11))
    else:  # one of the global batches the profile's cost data was timed at, shared by the ranks
        batch = int(rng.choice(profile.collect_batch_sizes)) // world
    probe = Task(name=name, tables=tuple(tables), topology=Topology(world, world), batch_size_per_rank=batch,
                 optimizer=optimizer, dtype=dtype)
    sizes = [table_bytes(probe, t) for t in tables]
    slack = float(rng.uniform(1.15, 1.6))
    cap = max(sum(sizes) / world * slack, max(sizes) * 1.02)
    if oversize:
        cap = sum(sizes) / world * slack
    topo = Topology(world_size=world, local_world_size=ranks_per_host or world, device=profile.device,
                    memory_per_rank_gb=round(cap / GB + 5e-4, 3))
    return Task(name=name, tables=tuple(tables), topology=topo, batch_size_per_rank=batch,
                optimizer=optimizer, dtype=dtype,
                extra={"generator": {"profile": profile.name, "slack": round(slack, 3), "oversize": oversize}})
