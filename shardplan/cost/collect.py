"""Collecting compute-cost data on real FBGEMM kernels.

A sample is a random set of 1 to 15 shards, as NeuroShard builds them: tables
drawn from a pool, their dims re-drawn (column blocks of any table are tables
of that many columns, since a column-wise shard sees every id) and some cut to
row ranges (a row-wise shard sees only its rows' ids). The set runs as one
FBGEMM table-batched op on the global batch; forward and backward are timed
(:func:`shardplan.cost.kernel.time_specs`) with the profile's protocol
(warm-up iterations, then the median of the timed repeats; every repeat is kept).

Beside each sample the fixed reference workload of
:func:`shardplan.cost.kernel.time_reference` is timed just before and just
after it; a sample whose reference shows the machine disturbed is timed again
(up to ``COLLECT_ATTEMPTS``), and training divides what drift remains out with
those two figures (the raw times are what is stored). Dividing alone is not
enough: re-timing sets taken on a disturbed machine moved their labels by 20%
on average, where two quiet timings agree within 6%
(``data/profiles/cpu-2c/label-repeatability.md``).

Rows go to ``data/profiles/<profile>/compute.parquet``. Sample ``i`` is drawn
from ``default_rng([seed, i])``, so a stopped run resumes where it stopped and
produces exactly what an unbroken run would have.
"""
from __future__ import annotations

import datetime as _dt
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from ..domain import Table
from .kernel import QUIET_TOLERANCE, fbgemm_versions, time_reference, time_specs_bracketed
from .profiles import Profile, load1, machine_stamp, reference_ms
from .specs import ShardSpec, specs_from_json, specs_to_json

COLLECT_DIMS = (4, 8, 12, 16, 24, 32, 48, 64, 96, 128)
COLLECT_DIM_WEIGHTS = (2, 3, 1, 3, 1, 3, 1, 3, 1, 3)
ROW_SPLITS = (2, 4, 8)
ROW_SHARE = 0.3  # of a random set's shards cut to a row range


def random_sample(rng: np.random.Generator, pool: list[Table], profile: Profile,
                  min_shards: int = 1, max_shards: int = 15, min_cols: int = 0,
                  row_share: float = ROW_SHARE, row_splits: tuple[int, ...] = ROW_SPLITS) -> list[ShardSpec]:
    """A random shard set within the profile's per-sample weight and lookup budgets.

    The budgets grow with ``max_shards`` beyond 15 so that larger sets are not
    just more of the smallest shards. ``min_cols`` draws only the dims of at least that
    many columns (a targeted collection of wide hot shards); at 0 the draws are exactly the
    default collection's. ``row_share`` of the shards are cut to one of ``row_splits`` row
    ranges: row-wise plans put a 1/world slice of many tables on every rank (TorchRec's
    plans of the 16-rank GPU suite: a median of 16 slices of 1/16 in a rank of 24 shards,
    where fewer than 1% of the default collection's sets hold 8 slices); at the defaults the
    draws are the default collection's.
    """
    batch = int(rng.choice(profile.collect_batch_sizes))
    n = int(rng.integers(min_shards, max_shards + 1))
    scale = max(1.0, max_shards / 15)
    dims, weights = zip(*[(d, wt) for d, wt in zip(COLLECT_DIMS, COLLECT_DIM_WEIGHTS) if d >= min_cols])
    w = np.array(weights, dtype=float)
    p = w / w.sum()
    specs: list[ShardSpec] = []
    weight_bytes = 0
    lookup_floats = 0.0
    attempts = 0
    while len(specs) < n and attempts < 20 * n:
        attempts += 1
        t = pool[int(rng.integers(len(pool)))]
        cols = int(rng.choice(dims, p=p))
        table_rows = min(t.num_embeddings, profile.max_rows)
        row_offset, rows = 0, table_rows
        if table_rows >= 64 and rng.random() < row_share:
            parts = int(rng.choice(row_splits))
            block = -(-table_rows // parts)
            # the parts that hold rows: fewer than ``parts`` where the table is short for them (65 rows in
            # 16 parts of 5 fill 13); with the default splits and 64 rows or more, always all of them
            i = int(rng.integers(-(-table_rows // block)))
            row_offset, rows = i * block, min(block, table_rows - i * block)
        frac = rows / table_rows
        nbytes = rows * cols * 4
        floats = batch * t.pooling_factor * frac * cols
        if (weight_bytes + nbytes > scale * profile.max_sample_weight_bytes
                or lookup_floats + floats > scale * profile.max_sample_lookup_floats):
            continue
        weight_bytes += nbytes
        lookup_floats += floats
        specs.append(ShardSpec(table=t.name, table_rows=table_rows, row_offset=row_offset, rows=rows,
                               cols=cols, pooling_factor=t.pooling_factor, zipf_alpha=t.zipf_alpha,
                               batch_size=batch))
    return specs


def gpu_identity(nvidia_smi_csv: str) -> tuple[str, str]:
    """(driver, GPU UUID) of the first GPU from ``nvidia-smi --query-gpu=driver_version,uuid
    --format=csv,noheader``; empty strings where it printed nothing.

    The UUID tells two machines of one GPU model apart: session 43's H200 ran the suite's ranks 15%
    faster than session 41's, and the rows of both recorded the same name, host CPU and driver."""
    lines = nvidia_smi_csv.strip().splitlines()
    fields = [f.strip() for f in lines[0].split(",")] if lines else []
    driver, uuid = (fields + ["", ""])[:2]
    return driver, uuid


def _stamp(profile: Profile, optimizer: str, dtype: str) -> dict[str, object]:
    gpu: dict[str, object] = {}
    if profile.device == "cuda":  # the GPU, its driver and CUDA, beside the host
        import subprocess

        query = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,uuid", "--format=csv,noheader"],
                               capture_output=True, text=True).stdout
        driver, uuid = gpu_identity(query)
        gpu = {"gpu_name": torch.cuda.get_device_name(0), "gpu_uuid": uuid, "cuda": torch.version.cuda,
               "driver": driver}
    return {"profile": profile.name, **machine_stamp(), **gpu, **fbgemm_versions(),
            "threads": torch.get_num_threads(), "optimizer": optimizer, "dtype": dtype}


COLLECT_ATTEMPTS = 4  # a sample timed while the machine was disturbed is retried (kernel.disturbed)


def collect_attempts(profile: Profile) -> int:
    """Timings a sample may take. The shared CPU VM drifts, so a disturbed sample is retried; a lent GPU is
    the process's alone, and its sub-millisecond reference reads launch jitter as disturbance, so a GPU
    sample is timed once (its references are still recorded beside it)."""
    return COLLECT_ATTEMPTS if profile.device == "cpu" else 1


def quiet_reference_ms(profile: Profile) -> float:
    """The reference time of the quiet machine: the profile's ``reference.json`` or, on a
    profile not yet trained, the fastest of a few timings now."""
    return reference_ms(profile) or min(time_reference(profile.device) for _ in range(5))


def spec_columns(specs: list[ShardSpec]) -> dict[str, object]:
    """The columns by which every cost-data row names its shard set."""
    return {"num_shards": len(specs), "batch_size": max(s.batch_size for s in specs), "shards": specs_to_json(specs)}


def timed_row(specs: list[ShardSpec], optimizer: str, dtype: str, profile: Profile, id_seed: int,
              warmup: int, repeats: int, quiet_ms: float,
              slow_limit: float = QUIET_TOLERANCE) -> dict[str, object]:
    """One shard set timed as every cost-data row records it: the specs, medians and every repeat,
    the protocol, the reference workload before and after (retried while
    :func:`kernel.disturbed` says the machine was more than ``slow_limit`` over ``quiet_ms``
    or changed speed during the timing; recorded), the load and the date."""
    before = load1()
    b = time_specs_bracketed(specs, optimizer, dtype, profile.device, id_seed, warmup, repeats,
                             quiet_ms=quiet_ms, max_attempts=collect_attempts(profile), slow_limit=slow_limit)
    t = b.timing
    return {**spec_columns(specs), "id_seed": id_seed, "fwd_ms": t.fwd_ms, "bwd_ms": t.bwd_ms,
            "fwd_samples_ms": list(t.fwd_samples_ms), "bwd_samples_ms": list(t.bwd_samples_ms),
            "warmup": warmup, "repeats": repeats, "ref_before_ms": b.ref_before_ms, "ref_after_ms": b.ref_after_ms,
            "attempts": b.attempts, "quiet_ms": quiet_ms, "slow_limit": slow_limit,
            "load1_before": before, "load1_after": load1(),
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}


def row_id_seed(row: pd.Series) -> int:
    """The id seed a stored row was timed with (rows before the ``id_seed`` column: random sets
    used their sample index, plan ranks their task's sample number plus the rank)."""
    if "id_seed" in row and pd.notna(row["id_seed"]):
        return int(row["id_seed"])
    return int(row["sample"]) + (int(row["rank"]) if row["source"] == "plan-rank" else 0)


def append_rows(existing: pd.DataFrame, rows: list[dict] | pd.DataFrame, out: Path) -> pd.DataFrame:
    """``existing`` plus ``rows``, written to ``out`` in place of it (via a temp file, so a stop
    never leaves half a file); the collectors call this every few rows, which makes them resumable."""
    if len(rows) == 0:
        return existing
    existing = pd.concat([existing, pd.DataFrame(rows)], ignore_index=True)
    tmp = out.with_suffix(".parquet.tmp")
    existing.to_parquet(tmp, index=False)
    os.replace(tmp, out)
    return existing


RETIME_KEEP = ("seed", "sample", "source", "task", "searcher", "rank", "round")


def retime(profile: Profile, src: Path, out: Path, flush_every: int = 25) -> pd.DataFrame:
    """Time again, under the current protocol, every shard set of the cost-data file ``src``.

    Rows of ``out`` keep ``src``'s identifying columns (seed, sample, source,
    task, searcher, rank, round) and its id seeds, so the two files pair up row
    by row (``src_row``): the pairs show how repeatable the labels are, and
    ``out`` can replace ``src`` as cleaner data. Resumable.
    """
    profile.use_threads()
    source = pd.read_parquet(src)
    existing = pd.read_parquet(out) if out.exists() else pd.DataFrame()
    done = set(existing["src_row"]) if len(existing) else set()
    quiet_ms = quiet_reference_ms(profile)
    stamps: dict[tuple[str, str], dict[str, object]] = {}  # per (optimizer, dtype): the stamp reads the machine
    rows: list[dict] = []
    out.parent.mkdir(parents=True, exist_ok=True)
    todo = [i for i in range(len(source)) if i not in done]
    for i in tqdm(todo, desc=f"retime {src.name} [{profile.name}]", initial=len(done), total=len(source)):
        row = source.iloc[i]
        keep = {k: row[k] for k in RETIME_KEEP if k in source.columns}
        if row["source"] != "plan-rank-infeasible":  # those rows record a plan that did not exist
            kind = (str(row["optimizer"]), str(row["dtype"]))
            if kind not in stamps:
                stamps[kind] = _stamp(profile, *kind)
            keep |= timed_row(specs_from_json(row["shards"]), *kind, profile, row_id_seed(row),
                              int(row["warmup"]), int(row["repeats"]), quiet_ms)
            keep |= stamps[kind]
        rows.append({"src_row": i, **keep})
        if len(rows) >= flush_every:
            existing, rows = append_rows(existing, rows, out), []
    return append_rows(existing, rows, out)


def collect_compute(profile: Profile, pool: list[Table], out: Path, num_samples: int, seed: int = 0,
                    optimizer: str = "sgd", dtype: str = "fp32", flush_every: int = 25,
                    warmup: int | None = None, repeats: int | None = None, min_shards: int = 1,
                    max_shards: int = 15, max_seconds: float | None = None, min_cols: int = 0,
                    row_share: float = ROW_SHARE, row_splits: tuple[int, ...] = ROW_SPLITS) -> pd.DataFrame:
    """Append samples to ``out`` until it holds ``num_samples`` rows of this seed; resumable.

    ``warmup``/``repeats`` default to the profile's timing protocol; ``min_cols``, ``row_share`` and
    ``row_splits`` as in :func:`random_sample` (a collection that changes them takes a seed of its own,
    since a seed's sample ``i`` is one set). With ``max_seconds`` it stops
    (what it has written kept) once that much time has passed, so that a lent machine's time limit
    ends a call cleanly and the next call resumes.
    """
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    warmup = profile.warmup if warmup is None else warmup
    repeats = profile.repeats if repeats is None else repeats
    profile.use_threads()
    existing = pd.read_parquet(out) if out.exists() else pd.DataFrame()
    done = set(existing.loc[existing["seed"] == seed, "sample"]) if len(existing) else set()
    todo = [i for i in range(num_samples) if i not in done]
    stamp = _stamp(profile, optimizer, dtype)
    quiet_ms = quiet_reference_ms(profile)
    rows: list[dict] = []
    out.parent.mkdir(parents=True, exist_ok=True)
    for i in tqdm(todo, desc=f"collect compute [{profile.name}]", initial=len(done), total=num_samples):
        if deadline is not None and time.monotonic() > deadline:
            break
        rng = np.random.default_rng([seed, i])
        specs = random_sample(rng, pool, profile, min_shards, max_shards, min_cols, row_share, row_splits)
        rows.append({"seed": seed, "sample": i, "source": "random",
                     **timed_row(specs, optimizer, dtype, profile, i, warmup, repeats, quiet_ms), **stamp})
        if len(rows) >= flush_every:
            existing, rows = append_rows(existing, rows, out), []
    return append_rows(existing, rows, out)

