"""bench/unfit_pooling.py: pairs of runs tell noise (pooling helps) from a shared bias (it does not)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest


def _runs(rng: np.random.Generator, truth: np.ndarray, names: list[str], noise: float,
          bias: np.ndarray | None = None) -> pd.DataFrame:
    shared = np.ones_like(truth) if bias is None else bias
    return pd.DataFrame({n: truth * shared * np.exp(rng.normal(0, noise, truth.size)) for n in names})


def test_noise_pools_away_and_a_shared_bias_does_not(load_script) -> None:
    up = load_script("bench/unfit_pooling.py")
    rng = np.random.default_rng(0)
    truth = rng.uniform(10, 40, 400)
    fit = _runs(rng, truth, ["f1", "f2", "f3", "f4"], 0.01)
    kept = pd.Index(range(400))
    noisy = up.pairs(fit, _runs(rng, truth, ["u1", "u2"], 0.06), kept).set_index("kind")
    biased = up.pairs(fit, _runs(rng, truth, ["u1", "u2"], 0.01, np.exp(rng.normal(0, 0.06, 400))), kept)
    biased = biased.set_index("kind")
    assert len(noisy.loc["fit"]) == 6 and (noisy.loc["fit", "consensus_runs"] == 2).all()  # the two in no pair
    n, b = noisy.loc["unfit"], biased.loc["unfit"]
    assert abs(n.alike) < 0.15 and n.gap_pooled < 0.8 * min(n.gap_a, n.gap_b)  # noise: pooling two shrinks it
    assert b.alike > 0.8 and b.gap_pooled > 0.9 * min(b.gap_a, b.gap_b)  # a bias every run shares stays
    assert b.apart < 0.3 * b.gap_a  # and the two runs agree with each other far better than with the truth
    assert noisy.loc["fit", "gap_a"].max() < 0.03  # fit runs lie close to the consensus of the others


def test_pair_row_reads_gaps_as_ratios(load_script) -> None:
    up = load_script("bench/unfit_pooling.py")
    cons = pd.Series([10.0, 20.0, 30.0])
    row = up.pair_row(cons * 1.10, cons * 0.90, cons)
    assert row["gap_a"] == pytest.approx(0.10) and row["signed_b"] == pytest.approx(-0.10)
    assert row["gap_pooled"] == pytest.approx(1 - (1.1 * 0.9) ** 0.5)  # the geometric mean of the two
    assert row["apart"] == pytest.approx(1.1 / 0.9 - 1)


def test_by_size_finds_a_bias_on_short_ranks_alone(load_script) -> None:
    up = load_script("bench/unfit_pooling.py")
    rng = np.random.default_rng(1)
    truth = np.r_[rng.uniform(2, 6, 20), rng.uniform(12, 40, 80)]
    fit = _runs(rng, truth, ["f1", "f2", "f3"], 0.005)
    unfit = _runs(rng, truth, ["u1"], 0.005, np.where(truth < 6, 1.2, 1.0))  # short ranks read 20% high
    table = up.by_size(fit, unfit, up.consensus_ms(fit)).set_index(["run", "band"])
    assert table.loc[("u1", "0-6 ms"), "signed"] == pytest.approx(0.2, abs=0.01)
    assert table.loc[("u1", "0-6 ms"), "ranks"] == 20 and ("u1", "6-10 ms") not in table.index  # no such ranks
    assert abs(table.loc[("u1", "20-inf ms"), "signed"]) < 0.01 and abs(table.loc[("f2", "0-6 ms"), "signed"]) < 0.01
