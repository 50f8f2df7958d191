"""bench/plan_group_drift.py: the scatter of a plan's structure between two timings of it."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest


def _collection(path, date: str, rnd: int, lasting: np.ndarray, scatter: float, seed: int,
                changed_task: int | None = None):
    """Plan-group rows of 80 three-rank plans: ms = exp(the rank's lasting structure + fresh scatter) times
    one factor per task (the collection's divisor, which only the plan's mean sees)."""
    rng = np.random.default_rng(seed)
    rows = []
    for t in range(lasting.shape[0]):
        level = rng.uniform(0.5, 2.0)
        for r in range(lasting.shape[1]):
            ms = np.exp(lasting[t, r] + rng.normal(0.0, scatter)) * level * 10
            shards = f"plan {t} rank {r}" + (" (other plan)" if t == changed_task else "")
            rows.append({"searcher": "torchrec", "round": rnd, "task": f"task-{t:02d}", "rank": r,
                         "shards": shards, "date": date, "fwd_ms": ms / 3, "bwd_ms": 2 * ms / 3})
    rows.append({**rows[0], "searcher": "neuroshard", "fwd_ms": 99.0})  # another searcher's: not read
    pd.DataFrame(rows).to_parquet(path)
    return path


def test_the_scatter_of_a_plans_structure_is_recovered(load_script, tmp_path) -> None:
    drift = load_script("bench/plan_group_drift.py")
    lasting = np.random.default_rng(9).normal(0.0, 0.3, (80, 3))
    paths = [_collection(tmp_path / "a.parquet", "2026-11-22T06:00:00+00:00", 0, lasting, 0.02, 1),
             _collection(tmp_path / "b.parquet", "2026-11-22T09:00:00+00:00", 1, lasting, 0.02, 2),
             _collection(tmp_path / "c.parquet", "2026-11-23T04:00:00+00:00", 2, lasting + np.random.default_rng(3)
                         .normal(0.0, 0.06, lasting.shape), 0.02, 4, changed_task=5)]
    pairs = drift.pair_scatter(drift.collections(paths, "torchrec")).set_index(["a", "b"])
    same = pairs.loc[("a round 0", "b round 1")]
    assert bool(same["same day"]) and same["ranks"] == 240
    # within a plan of 3 ranks, demeaning keeps 2/3 of each variance
    assert same["scatter per collection"] == pytest.approx(0.02 * np.sqrt(2 / 3), rel=0.15)
    apart = pairs.loc[("a round 0", "c round 2")]
    assert not bool(apart["same day"]) and apart["ranks"] == 237  # task 5's plan changed: left out
    expected = np.sqrt(0.02**2 + 0.06**2 / 2) * np.sqrt(2 / 3)
    assert apart["scatter per collection"] == pytest.approx(expected, rel=0.15)
