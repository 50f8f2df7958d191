"""Mixes: plan-rank-like sets of whole tables, labelled by neighbour calibration.

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

:func:`crowded_mix_sample` is the second recipe (``shardplan collect
crowded-mixes``): the misses left after hot mixes (``unseen-c-04`` rank 1,
``unseen-c-06`` rank 0, ``unseen-b-08`` rank 0) are ranks of 10 to 31 whole
tables, several of a million rows, touching 20-45 MB of rows a batch between
them; taken apart, such a rank ran 1.61 times its shards alone where the model
said 1.26. The random sets' budgets (600 MB held, 15 shards) never draw them.

:func:`moderate_mix_sample` is the third (``shardplan collect moderate-mixes``): 8-30 whole tables
each of whose rows touched a batch fit the cache on their own (``MODERATE_MAX_SHARD_TOUCHED``) and not
together. On the Xeon, 16 like tables of 1.4 MB touched each ran 1.18 times their 16 ops alone and 24
ran 1.38 times, where the committed model said 0.98 and 1.21 (``bench/like_tables.py``); the crowded
mixes draw half their tables from the large ones, whose rows leave the cache alone as well.

Each recipe (:data:`RECIPES`) draws a set from a pool the caller has filtered
(``shardplan collect hot-mixes`` / ``crowded-mixes`` leave out every table of
``--exclude-suites``, so no unseen table is ever a label); sample ``i`` of seed
``s`` is drawn from ``default_rng([s, i])`` and timed with id seed
``<recipe's id seed> + i``, so a stopped run resumes exactly. Rows go to
``data/profiles/<profile>/compute-<recipe>-mixes.parquet``: the calibrated
fwd/bwd ms as labels, beside the raw times, the neighbours' factor, the
reference's slowdown, which stored ranks were the neighbours (positions in
:func:`calibration.labelled_pool` as it stood), the load and the date.
"""
from __future__ import annotations

import datetime as _dt
import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from ..domain import Table
from .calibration import calibrated_timing, weight_bytes
from .collect import _stamp, append_rows, spec_columns
from .draws import COLLECT_DIM_WEIGHTS, COLLECT_DIMS
from .features import touched_bytes
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
CROWDED_ID_SEED = 60_000  # and apart from the hot mixes' (which stay under 10,000 sets)
CROWDED_SHARDS = (8, 30)  # the misses hold 10 to 31 tables
CROWDED_LARGE_SHARE = 0.5  # of the tables drawn, how many are large (c-04 r1: 4 of 11 at a million rows)
CROWDED_BATCHES = (1024, 2048, 4096, 8192)  # the misses are at 1024, 2048, 4096 and 8192
CROWDED_MAX_TOUCHED = 60e6  # bytes of rows touched a batch (the misses: 22-45 MB)
CROWDED_MAX_HELD = 3e9  # bytes held (c-06 r0 holds 2.4 GB); also keeps a set beside its neighbours in memory
CROWDED_LOOKUP_SCALE = 1.5  # times the random sets' lookup budget: up to ~50 ms a set, as the misses' 14-35 ms
MODERATE_ID_SEED = 70_000  # apart from the crowded mixes' too
MODERATE_MAX_SHARD_TOUCHED = 4 * 2**20  # bytes of rows one table touches a batch: the Xeon's cliff lies at 6-12 MB
MODERATE_BATCHES = (512, 1024, 2048, 4096, 8192)
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


def _whole_tables(rng: np.random.Generator, profile: Profile, batch: int, pick: Callable[[], Table],
                  max_table_touched: float = np.inf) -> list[ShardSpec]:
    """8-30 whole tables at ``batch``, each from ``pick`` at a dim drawn as the random sets' are; a table that
    touches over ``max_table_touched`` bytes of rows a batch on its own, or would take the set past
    ``CROWDED_MAX_TOUCHED`` bytes touched, ``CROWDED_MAX_HELD`` held or the scaled lookup budget, is passed
    over, each table at most once (the crowded and moderate mixes' common draw)."""
    n = int(rng.integers(CROWDED_SHARDS[0], CROWDED_SHARDS[1] + 1))
    p = np.array(COLLECT_DIM_WEIGHTS, dtype=float) / sum(COLLECT_DIM_WEIGHTS)
    max_floats = CROWDED_LOOKUP_SCALE * profile.max_sample_lookup_floats
    specs: list[ShardSpec] = []
    touched = held = floats = 0.0
    for _ in range(20 * n):
        if len(specs) == n:
            break
        t = pick()
        spec = _spec(t, int(rng.choice(COLLECT_DIMS, p=p)), batch, profile.max_rows)
        t_bytes, h_bytes = touched_bytes([spec]), weight_bytes([spec])
        f = batch * t.pooling_factor * spec.cols
        if (t_bytes > max_table_touched or any(s.table == t.name for s in specs)
                or touched + t_bytes > CROWDED_MAX_TOUCHED or held + h_bytes > CROWDED_MAX_HELD
                or floats + f > max_floats):
            continue
        specs.append(spec)
        touched, held, floats = touched + t_bytes, held + h_bytes, floats + f
    return specs


def crowded_mix_sample(rng: np.random.Generator, pool: list[Table], profile: Profile) -> list[ShardSpec]:
    """8-30 whole tables at one batch size (:func:`_whole_tables`), each drawn from the large ones (at least
    ``HOT_MIN_ROWS`` rows) with probability ``CROWDED_LARGE_SHARE`` and from the rest otherwise."""
    big = [t for t in pool if t.num_embeddings >= HOT_MIN_ROWS]
    rest = [t for t in pool if t.num_embeddings < HOT_MIN_ROWS]
    if not (big and rest):
        raise ValueError("the pool needs large and smaller tables to draw crowded mixes from")

    def pick() -> Table:
        tables = big if rng.random() < CROWDED_LARGE_SHARE else rest
        return tables[int(rng.integers(len(tables)))]

    return _whole_tables(rng, profile, int(rng.choice(CROWDED_BATCHES)), pick)


def moderate_mix_sample(rng: np.random.Generator, pool: list[Table], profile: Profile) -> list[ShardSpec]:
    """8-30 whole tables at one batch size (:func:`_whole_tables`) from the whole pool, each touching at most
    ``MODERATE_MAX_SHARD_TOUCHED`` bytes of rows a batch at the dim drawn for it."""
    return _whole_tables(rng, profile, int(rng.choice(MODERATE_BATCHES)),
                         lambda: pool[int(rng.integers(len(pool)))], MODERATE_MAX_SHARD_TOUCHED)


# recipe -> (drawing, id seed base, the rows' source)
RECIPES = {"hot": (hot_mix_sample, HOT_ID_SEED, "hot-mix"),
           "crowded": (crowded_mix_sample, CROWDED_ID_SEED, "crowded-mix"),
           "moderate": (moderate_mix_sample, MODERATE_ID_SEED, "moderate-mix")}


def collect_hot_mixes(profile: Profile, pool: list[Table], out: Path, num_samples: int, seed: int = 0,
                      optimizer: str = "sgd", dtype: str = "fp32", flush_every: int = 5,
                      max_seconds: float | None = None, recipe: str = "hot") -> pd.DataFrame:
    """Append neighbour-calibrated mixes of ``recipe`` (:data:`RECIPES`) to ``out`` until it holds
    ``num_samples`` rows of this seed; resumable (module docstring)."""
    draw, id_base, source = RECIPES[recipe]
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    profile.use_threads()
    existing = pd.read_parquet(out) if out.exists() else pd.DataFrame()
    done = set(existing.loc[existing["seed"] == seed, "sample"]) if len(existing) else set()
    todo = [i for i in range(num_samples) if i not in done]
    stamp = _stamp(profile, optimizer, dtype)
    rows: list[dict] = []
    out.parent.mkdir(parents=True, exist_ok=True)
    for i in tqdm(todo, desc=f"collect {recipe} mixes [{profile.name}]", initial=len(done), total=num_samples):
        if deadline is not None and time.monotonic() > deadline:
            break
        specs = draw(np.random.default_rng([seed, i]), pool, profile)
        before = load1()
        ct = calibrated_timing(specs, optimizer, dtype, id_base + i, profile, visits=VISITS, passes=PASSES)
        rows.append({"seed": seed, "sample": i, "source": source, **spec_columns(specs),
                     "id_seed": id_base + i, "fwd_ms": ct.fwd_ms, "bwd_ms": ct.bwd_ms,
                     "raw_fwd_ms": ct.raw_fwd_ms, "raw_bwd_ms": ct.raw_bwd_ms, "factor": ct.factor,
                     "reference_slowdown": ct.reference_slowdown, "neighbours": list(ct.neighbours),
                     "passes": ct.passes, "visits": VISITS, "load1_before": before, "load1_after": load1(),
                     "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), **stamp})
        if len(rows) >= flush_every:
            existing, rows = append_rows(existing, rows, out), []
    return append_rows(existing, rows, out)
