"""Collecting compute-cost data on real FBGEMM kernels.

A sample is a random set of 1 to 15 shards, as NeuroShard builds them
(:mod:`shardplan.cost.draws`). The set runs as one FBGEMM table-batched op on
the global batch (and a second on the local batch where it holds data-parallel
replicas, as a plan's rank does); forward and backward are timed
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
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from ..domain import Table
from ..errors import InputError
from .draws import SetShape, random_sample
from .kernel import (QUIET_TOLERANCE, disturbed, fbgemm_versions, require_device, require_kernel, time_reference,
                     time_specs_bracketed)
from .labels import RETIME_KEYS
from .profiles import Profile, load1, machine_stamp, reference_ms
from .specs import ShardSpec, specs_from_json, specs_to_json

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

        require_device(profile.device)  # before nvidia-smi, which a CPU host does not have either

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
              slow_limit: float = QUIET_TOLERANCE, wait_quiet_s: float = 0.0) -> dict[str, object]:
    """One shard set timed as every cost-data row records it: the specs, medians and every repeat,
    the protocol, the reference workload before and after (retried while
    :func:`kernel.disturbed` says the machine was more than ``slow_limit`` over ``quiet_ms``
    or changed speed during the timing; recorded), the load and the date.

    With ``wait_quiet_s``, a set the gate still failed on its last attempt is timed once more after
    :func:`wait_until_quiet` (up to that many seconds), and the less disturbed of the two timings is kept
    (``waited_s`` records the wait): a guest disturbed in spells of minutes outlasts the retries' pauses, and
    dividing by the slowdown corrects only part of a disturbed label."""
    row = _timed_once(specs, optimizer, dtype, profile, id_seed, warmup, repeats, quiet_ms, slow_limit)
    if wait_quiet_s <= 0 or not failed_gate(row):
        return row
    waited = wait_until_quiet(profile.device, quiet_ms, wait_quiet_s, slow_limit=slow_limit)
    again = _timed_once(specs, optimizer, dtype, profile, id_seed, warmup, repeats, quiet_ms, slow_limit)
    return {**min((row, again), key=lambda r: max(r["ref_before_ms"], r["ref_after_ms"])), "waited_s": waited}


def _timed_once(specs: list[ShardSpec], optimizer: str, dtype: str, profile: Profile, id_seed: int,
                warmup: int, repeats: int, quiet_ms: float, slow_limit: float) -> dict[str, object]:
    before = load1()
    b = time_specs_bracketed(specs, optimizer, dtype, profile.device, id_seed, warmup, repeats,
                             quiet_ms=quiet_ms, max_attempts=collect_attempts(profile), slow_limit=slow_limit,
                             pause_s=profile.retry_pause_s)
    t = b.timing
    return {**spec_columns(specs), "id_seed": id_seed, "fwd_ms": t.fwd_ms, "bwd_ms": t.bwd_ms,
            "fwd_samples_ms": list(t.fwd_samples_ms), "bwd_samples_ms": list(t.bwd_samples_ms),
            "warmup": warmup, "repeats": repeats, "ref_before_ms": b.ref_before_ms, "ref_after_ms": b.ref_after_ms,
            "attempts": b.attempts, "quiet_ms": quiet_ms, "slow_limit": slow_limit,
            "load1_before": before, "load1_after": load1(),
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}


def failed_gate(row: Mapping[str, object]) -> bool:
    """Whether a row :func:`timed_row` wrote is still :func:`.kernel.disturbed` after its last attempt. A row
    of a collection from before the gate's limit was recorded (no ``slow_limit``, or NaN) was taken under the
    default one, ``QUIET_TOLERANCE``, as :func:`.fitness.taken_under_quiet_gate` reads it too."""
    limit = row.get("slow_limit")
    limit = QUIET_TOLERANCE if limit is None or pd.isna(limit) else float(limit)
    return disturbed(float(row["ref_before_ms"]), float(row["ref_after_ms"]), float(row["quiet_ms"]), limit)


def wait_until_quiet(device: str, quiet_ms: float, max_s: float, streak: int = 3, every_s: float = 2.0,
                     slow_limit: float = QUIET_TOLERANCE) -> float:
    """Time the reference every ``every_s`` seconds until ``streak`` readings in a row are within ``slow_limit``
    of ``quiet_ms``, or ``max_s`` seconds pass; the seconds waited. The reference is a few milliseconds of work,
    so the waiting leaves the cores as good as idle."""
    start = time.monotonic()
    run = 0
    while run < streak and time.monotonic() - start < max_s:
        run = run + 1 if time_reference(device) <= slow_limit * quiet_ms else 0
        if run < streak:
            time.sleep(every_s)
    return time.monotonic() - start


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


def retime(profile: Profile, src: Path, out: Path, flush_every: int = 25, wait_quiet_s: float = 0.0) -> pd.DataFrame:
    """Time again, under the current protocol, every shard set of the cost-data file ``src``.

    Rows of ``out`` keep ``src``'s identifying columns (seed, sample, source,
    task, searcher, rank, round) and its id seeds, so the two files pair up row
    by row (``src_row``): the pairs show how repeatable the labels are, and
    ``out`` can replace ``src`` as cleaner data. Resumable; ``wait_quiet_s`` as in :func:`timed_row`.
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
        keep = {k: row[k] for k in RETIME_KEYS if k in source.columns}
        if row["source"] != "plan-rank-infeasible":  # those rows record a plan that did not exist
            kind = (str(row["optimizer"]), str(row["dtype"]))
            if kind not in stamps:
                stamps[kind] = _stamp(profile, *kind)
            keep |= timed_row(specs_from_json(row["shards"]), *kind, profile, row_id_seed(row),
                              int(row["warmup"]), int(row["repeats"]), quiet_ms, wait_quiet_s=wait_quiet_s)
            keep |= stamps[kind]
        rows.append({"src_row": i, **keep})
        if len(rows) >= flush_every:
            existing, rows = append_rows(existing, rows, out), []
    return append_rows(existing, rows, out)


def data_kinds(df: pd.DataFrame) -> list[tuple[str, str]]:
    """The (optimizer, dtype) pairs a cost-data frame's timings ran with (rows from before ``dtype`` was
    stamped are fp32's)."""
    if not len(df) or "optimizer" not in df:
        return []
    dtypes = df["dtype"] if "dtype" in df else pd.Series("fp32", index=df.index)
    return sorted({(str(o), str(d)) for o, d in zip(df["optimizer"], dtypes.fillna("fp32")) if isinstance(o, str)})


def check_one_kind(existing: pd.DataFrame, out: Path, optimizer: str, dtype: str) -> None:
    """Refuse to add timings of another optimizer or dtype to a file: the cost model has no feature for
    either, so a file of two kinds would be priced as one blend of both."""
    other = [k for k in data_kinds(existing) if k != (optimizer, dtype)]
    if other:
        raise InputError("--optimizer/--dtype", f"{out} holds timings with optimizer {other[0][0]!r} and dtype "
                         f"{other[0][1]!r}, not {optimizer!r} and {dtype!r}",
                         "collect each optimizer and dtype into a profile of its own (shardplan profiles --new "
                         "NAME --like BASE) or pass --out for another file")


def collect_compute(profile: Profile, pool: list[Table], out: Path, num_samples: int, seed: int = 0,
                    optimizer: str = "sgd", dtype: str = "fp32", flush_every: int = 25,
                    warmup: int | None = None, repeats: int | None = None, min_shards: int = 1,
                    max_shards: int = 15, max_seconds: float | None = None,
                    shape: SetShape = SetShape(), wait_quiet_s: float = 0.0) -> pd.DataFrame:
    """Append samples to ``out`` until it holds ``num_samples`` rows of this seed; resumable.

    ``warmup``/``repeats`` default to the profile's timing protocol; ``min_shards``, ``max_shards`` and
    ``shape`` as in :func:`random_sample` (a collection that changes them takes a seed of its own, since a
    seed's sample ``i`` is one set). With ``max_seconds`` it stops (what it has written kept) once that
    much time has passed, so that a lent machine's time limit ends a call cleanly and the next call resumes.
    ``wait_quiet_s`` as in :func:`timed_row`.
    """
    if not 1 <= min_shards <= max_shards:
        raise InputError("--min-shards/--max-shards", f"must be 1 <= min <= max, got {min_shards} and {max_shards}",
                         "give the fewest and most sharded shards a set holds, e.g. 1 and 15")
    shape.sharded_tables(pool), shape.replica_tables(pool)  # a pool it cannot draw from fails before any timing
    require_kernel(optimizer, dtype, profile.device, ("--optimizer", "--dtype"))
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    warmup = profile.warmup if warmup is None else warmup
    repeats = profile.repeats if repeats is None else repeats
    if repeats < 1 or warmup < 0:
        raise InputError("--repeats", f"need at least 1 timed iteration and warmup >= 0, got {repeats} and {warmup}",
                         "leave them out for the profile's protocol")
    profile.use_threads()
    existing = pd.read_parquet(out) if out.exists() else pd.DataFrame()
    check_one_kind(existing, out, optimizer, dtype)
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
        specs = random_sample(rng, pool, profile, min_shards, max_shards, shape)
        if len(specs) < min_shards:  # kept as drawn, so that the seed still reproduces the collection
            tqdm.write(f"sample {i}: {len(specs)} shards, under --min-shards {min_shards}: the profile's weight "
                       "and lookup budgets were spent first; the set is timed as drawn")
        row = timed_row(specs, optimizer, dtype, profile, i, warmup, repeats, quiet_ms, wait_quiet_s=wait_quiet_s)
        rows.append({"seed": seed, "sample": i, "source": "random", **row, **stamp})
        if len(rows) >= flush_every:
            existing, rows = append_rows(existing, rows, out), []
    return append_rows(existing, rows, out)

