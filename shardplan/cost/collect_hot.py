"""Hot mixes: plan-rank-like sets around a large hot table, labelled by neighbour calibration.

The rank the model misses most on the Xeon (``unseen-b-08`` rank 0) is a mix a
planner builds: one large table at a wide dim and high pooling, a large narrow
hot one, a few large cold narrow ones, and a handful of small tables, at one
batch size. Such ranks are the ones the host moves most between hours (a
third, where the small reference workload sees nothing: ``docs/cost-model.md``,
sessions 31-34), so labels of them timed against the reference alone carry
their hour's state. Here each set is timed as plan measurements are checked,
beside its labelled neighbours (:func:`calibration.calibrated_timing`), which
expresses it on the stored plan ranks' host whatever state the host is in now.
The labels are therefore plan ranks' level, not random sets'.

:func:`hot_mix_sample` draws a set from a pool the caller has filtered
(``shardplan collect hot-mixes`` leaves out every table of ``--exclude-suites``,
by default the held-out suites', so no unseen table is ever a label); sample
``i`` of seed ``s`` is drawn from ``default_rng([s, i])`` and timed with id seed
``HOT_ID_SEED + i``, so a stopped run resumes exactly. Rows go to
``data/profiles/<profile>/compute-hot-mixes.parquet``: the calibrated fwd/bwd ms
as labels, beside the raw times, the neighbours' factor, the reference's
slowdown, which stored ranks were the neighbours (positions in
:func:`calibration.labelled_pool` as it stood), the load and the date.
"""
from __future__ import annotations

import datetime as _dt
import json
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from ..domain import Table
from .calibration import calibrated_timing
from .collect import _stamp, append_rows, spec_columns
from .profiles import Profile, load1
from .specs import ShardSpec

HOT_MIN_ROWS = 500_000  # "large": 128-512 MB at 64-128 columns (rows capped at the profile's max_rows)
HOT_MIN_POOLING = 20.0  # "hot": the unseen misses sit at pooling 32.8-93.6
COLD_MAX_POOLING = 10.0
WIDE_DIMS = (64, 96, 128)
NARROW_DIMS = (4, 8)
COLD_DIMS = (4, 8, 16)
SMALL_DIMS = (4, 8, 12, 16, 24, 32, 48, 64, 96, 128)
HOT_BATCHES = (1024, 2048, 2048, 4096)  # 2048 twice: the unseen suites' batch
HOT_ID_SEED = 50_000  # id seeds apart from the random sets' (their sample index) and plan ranks'
VISITS, PASSES = 4, 2  # as bench/plan_accuracy.py --visits 4 --rounds 2 calibrates


def suite_table_names(suites: list[Path]) -> set[str]:
    """The pool names of every table of the task files under ``suites`` (tasks name a pool's table
    ``tNN_<pool name>``)."""
    names: set[str] = set()
    for suite in suites:
        for path in sorted(Path(suite).glob("*.json")):
            for t in json.loads(path.read_text())["tables"]:
                names.add(re.sub(r"^t\d+_", "", t["name"]))
    return names


def _spec(t: Table, cols: int, batch: int, max_rows: int) -> ShardSpec:
    rows = min(t.num_embeddings, max_rows)
    return ShardSpec(table=t.name, table_rows=rows, row_offset=0, rows=rows, cols=cols,
                     pooling_factor=t.pooling_factor, zipf_alpha=t.zipf_alpha, batch_size=batch)


def hot_mix_sample(rng: np.random.Generator, pool: list[Table], profile: Profile) -> list[ShardSpec]:
    """One large hot table at a wide dim; with probability 0.7 a second large hot one at a narrow dim;
    2-4 large cold ones at narrow dims; 4-8 small ones at any dim; whole tables, one batch size, each
    table at most once."""
    big = [t for t in pool if t.num_embeddings >= HOT_MIN_ROWS]
    hot = [t for t in big if t.pooling_factor >= HOT_MIN_POOLING]
    cold = [t for t in big if t.pooling_factor < COLD_MAX_POOLING]
    small = [t for t in pool if t.num_embeddings < HOT_MIN_ROWS]
    if not (hot and cold and small):
        raise ValueError("the pool needs large hot, large cold and small tables to draw hot mixes from")
    batch = int(rng.choice(HOT_BATCHES))
    pick = lambda tables: tables[int(rng.integers(len(tables)))]  # noqa: E731
    drawn = [(pick(hot), int(rng.choice(WIDE_DIMS)))]
    if rng.random() < 0.7:
        drawn.append((pick(hot), int(rng.choice(NARROW_DIMS))))
    drawn += [(pick(cold), int(rng.choice(COLD_DIMS))) for _ in range(int(rng.integers(2, 5)))]
    drawn += [(pick(small), int(rng.choice(SMALL_DIMS))) for _ in range(int(rng.integers(4, 9)))]
    seen: set[str] = set()
    specs = []
    for t, cols in drawn:
        if t.name not in seen:
            seen.add(t.name)
            specs.append(_spec(t, cols, batch, profile.max_rows))
    return specs


def collect_hot_mixes(profile: Profile, pool: list[Table], out: Path, num_samples: int, seed: int = 0,
                      optimizer: str = "sgd", dtype: str = "fp32", flush_every: int = 5,
                      max_seconds: float | None = None) -> pd.DataFrame:
    """Append neighbour-calibrated hot mixes to ``out`` until it holds ``num_samples`` rows of this seed;
    resumable (module docstring)."""
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    profile.use_threads()
    existing = pd.read_parquet(out) if out.exists() else pd.DataFrame()
    done = set(existing.loc[existing["seed"] == seed, "sample"]) if len(existing) else set()
    todo = [i for i in range(num_samples) if i not in done]
    stamp = _stamp(profile, optimizer, dtype)
    rows: list[dict] = []
    out.parent.mkdir(parents=True, exist_ok=True)
    for i in tqdm(todo, desc=f"collect hot mixes [{profile.name}]", initial=len(done), total=num_samples):
        if deadline is not None and time.monotonic() > deadline:
            break
        specs = hot_mix_sample(np.random.default_rng([seed, i]), pool, profile)
        before = load1()
        ct = calibrated_timing(specs, optimizer, dtype, HOT_ID_SEED + i, profile, visits=VISITS, passes=PASSES)
        rows.append({"seed": seed, "sample": i, "source": "hot-mix", **spec_columns(specs),
                     "id_seed": HOT_ID_SEED + i, "fwd_ms": ct.fwd_ms, "bwd_ms": ct.bwd_ms,
                     "raw_fwd_ms": ct.raw_fwd_ms, "raw_bwd_ms": ct.raw_bwd_ms, "factor": ct.factor,
                     "reference_slowdown": ct.reference_slowdown, "neighbours": list(ct.neighbours),
                     "passes": ct.passes, "visits": VISITS, "load1_before": before, "load1_after": load1(),
                     "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), **stamp})
        if len(rows) >= flush_every:
            existing, rows = append_rows(existing, rows, out), []
    return append_rows(existing, rows, out)
