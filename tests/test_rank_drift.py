"""bench/rank_drift.py: a rank the host moves under, told from a steady one."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from shardplan.cost.profiles import get_profile


def test_a_drifting_rank_is_told_from_a_steady_one(load_script) -> None:
    drift = load_script("bench/rank_drift.py")
    # rank 0 drifts by turn (10, 12, 14 ms over three turns); rank 1 reads 5 ms every time; the
    # reference reads 1.25x quiet throughout, which the figures are divided by
    turn = {"n": 0}

    def timer(specs, optimizer, dtype, device, seed, warmup, repeats, quiet_ms):
        rank = specs[0]
        ms = 5.0 if rank == "steady" else 10.0 + 2.0 * (turn["n"] // 6)
        turn["n"] += 1
        return SimpleNamespace(timing=SimpleNamespace(fwd_ms=1.25 * ms / 3, bwd_ms=1.25 * 2 * ms / 3),
                               ref_before_ms=1.25 * quiet_ms, ref_after_ms=1.25 * quiet_ms)

    df = drift.time_in_turns({0: ["drifting"], 1: ["steady"]}, get_profile("cpu-2c"), 2.0, reps=3, pause_s=0.0,
                             timer=timer)
    assert len(df) == 3 * 2 * len(drift.ID_SEEDS) and set(df.id_seed) == set(drift.ID_SEEDS)
    df["predicted_ms"] = df["rank"].map({0: 12.0, 1: 4.0})
    s = drift.drift_summary(df, {0: 1, 1: 1}).set_index("rank")
    assert s.loc[0, "median_ms"] == pytest.approx(12.0) and s.loc[0, "error"] == pytest.approx(0.0)
    assert (s.loc[0, "turn_min_ms"], s.loc[0, "turn_max_ms"]) == pytest.approx((10.0, 14.0))
    # 12 is 20% over the first turn's 10 ms and 14% under the last turn's 14: two turns of three within 15%
    assert s.loc[0, "within_15"] == pytest.approx(2 / 3)
    assert s.loc[1, "turn_max_ms"] == pytest.approx(s.loc[1, "turn_min_ms"]) and s.loc[1, "error"] == pytest.approx(-0.2)
