"""bench/build_variance.py: one kept build against fresh builds, on a fake kernel whose builds differ."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from shardplan.cost.kernel import KernelTiming
from shardplan.cost.profiles import get_profile, reference_ms


def test_fresh_builds_that_differ_spread_and_one_kept_build_does_not(load_script, monkeypatch):
    bv = load_script("bench/build_variance.py")
    speeds = itertools.cycle([4.0, 5.0, 6.0])  # each build lands somewhere else: its own time

    class FakeOp:
        def __init__(self, *args):
            self.ms = next(speeds)

        def run(self, warmup, repeats):
            samples = (self.ms / 2,) * repeats
            return KernelTiming(self.ms / 2, self.ms / 2, samples, samples)

    prof = get_profile("cpu-2c-nested")
    monkeypatch.setattr(bv, "RankOp", FakeOp)
    monkeypatch.setattr(bv, "time_reference", lambda device="cpu": 2.0 * reference_ms(prof))  # a steady 2x host
    t = bv.time_builds([], "sgd", "fp32", prof, builds=6)
    assert len(t["same"]) == len(t["fresh"]) == 6
    assert t["same_raw"] == [4.0] * 6 and t["same"] == pytest.approx([2.0] * 6)  # divided by the 2x reference
    assert sorted(set(t["fresh_raw"])) == [4.0, 5.0, 6.0]
    assert bv.log_sd(t["same"]) == 0.0 and bv.log_sd(t["fresh"]) == pytest.approx(
        np.std(np.log(t["fresh"]), ddof=1))
    assert bv.log_sd(t["fresh"]) > 0.1
