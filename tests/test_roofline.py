"""The published-bandwidth roofline that prices GPU profiles before they have cost data."""
from __future__ import annotations

import numpy as np
import pytest

from shardplan.cost import profiles
from shardplan.cost.baselines import RooflineCostModel, roofline_bytes
from shardplan.cost.estimator import load_estimator
from shardplan.cost.specs import ShardSpec
from shardplan.errors import InputError
from shardplan.formats import load_task
from shardplan.planning import estimator, plan
from shardplan.validate import plan_problems


def _spec(name: str, rows: int, cols: int, pooling: float) -> ShardSpec:
    return ShardSpec(table=name, table_rows=rows, row_offset=0, rows=rows, cols=cols, pooling_factor=pooling,
                     zipf_alpha=1.0, batch_size=65536)


SETS = [[_spec("a", 10_000_000, 64, 20.0)], [_spec("a", 10_000_000, 64, 20.0), _spec("b", 50_000, 16, 2.0)], []]


def test_published_roofline_is_bytes_over_bandwidth_and_scales_with_the_gpu():
    h100, h200 = RooflineCostModel.published("h100"), RooflineCostModel.published("h200")
    fwd, bwd = h100.predict(SETS[:1])
    peak = profiles.get_profile("h100").published.hbm_bytes_per_s
    assert fwd[0] == pytest.approx(roofline_bytes(SETS[0][0]) / (peak * 0.62) * 1e3)
    assert bwd[0] == pytest.approx(2 * fwd[0])
    assert h200.predict(SETS[:1])[0][0] == pytest.approx(fwd[0] * 3.35 / 4.8)
    with pytest.raises(InputError, match="publishes no HBM bandwidth"):
        RooflineCostModel.published("cpu-2c")


def test_roofline_incremental_sums_match_its_predictions():
    m = RooflineCostModel.published("h100")
    codes, times = m.encode_shards(SETS[1])  # shards a and b
    assert codes.shape == (2, m.code_width) and times.shape == (2, 2)
    sums = np.array([times[:1].sum(0), times.sum(0), np.zeros(2)])
    got = m.combine(np.zeros((3, m.code_width)), sums, np.array([1, 2, 0]))
    fwd, bwd = m.predict(SETS)
    np.testing.assert_allclose(got, np.stack([fwd, bwd], axis=1), rtol=1e-5)


def test_a_gpu_profile_without_a_model_plans_with_the_roofline_and_says_so(tmp_path, monkeypatch):
    # every GPU profile has a trained model now (h200 since session 41, h100 since 43): a profiles folder
    # without one stands for the next chip lent
    monkeypatch.setattr(profiles, "PROFILE_DIR", tmp_path)
    estimator.cache_clear()  # planning loads a profile's models once per process
    try:
        with pytest.warns(UserWarning, match="no trained compute model"):
            est = load_estimator("h100")
        assert est.compute_name.startswith("roofline")
        task = load_task("data/tasks/gpu-bench/gpu-bench-00.json")
        with pytest.warns(UserWarning, match="no trained compute model"):
            p = plan(task, searcher="neuroshard-tw", profile="h100")
    finally:
        estimator.cache_clear()
    assert plan_problems(p) == []
    assert p.cost.extra["compute_model"].startswith("roofline") and p.cost.extra["comm_model"] == "alpha-beta"
    with pytest.raises(InputError, match="no compute-cost model"):
        load_estimator("h100", "data/profiles/h100/missing.json")  # an explicit model path is never replaced
