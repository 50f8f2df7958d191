"""bench/variant_plans.py: the ensemble prices a rank from summed codes exactly as from the whole set."""
from __future__ import annotations

import numpy as np
import pytest

from shardplan.cost.model import NeuralCostModel
from shardplan.cost.specs import ShardSpec


def _sets(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    sets, fwd, bwd = [], [], []
    for _ in range(n):
        specs = [ShardSpec(f"t{rng.integers(50)}", int(rows), 0, int(rows), int(rng.choice([8, 32])),
                           float(rng.uniform(1, 20)), 0.0, 1024)
                 for rows in rng.integers(100, 10_000, int(rng.integers(1, 5)))]
        work = sum(s.pooling_factor * s.cols for s in specs) / 100.0
        sets.append(specs)
        fwd.append(0.05 + work)
        bwd.append(0.1 + 2 * work)
    return sets, np.array(fwd), np.array(bwd)


def test_ensemble_is_the_geometric_mean_of_its_members_whole_or_summed(load_script) -> None:
    variants = load_script("bench/variant_plans.py")
    sets, fwd, bwd = _sets(120)
    members = [NeuralCostModel(profile="cpu-2c", epochs=4, hidden=8, code=4, seed=0),
               NeuralCostModel(profile="cpu-2c", epochs=4, hidden=8, code=6, seed=1, context_totals=True)]
    members = [m.fit(sets, fwd, bwd, progress=False) for m in members]
    ensemble = variants.EnsembleModel(members)
    specs = sets[0] + sets[1]
    f, b = ensemble.predict([specs])
    (f0, b0), (f1, b1) = (m.predict([specs]) for m in members)
    assert f[0] == pytest.approx(np.sqrt(f0[0] * f1[0]), rel=1e-5)
    assert b[0] == pytest.approx(np.sqrt(b0[0] * b1[0]), rel=1e-5)
    codes, times = ensemble.encode_shards(specs)
    assert codes.shape == (len(specs), ensemble.code_width) == (len(specs), 4 + 6 + 3 + 2)
    ms = ensemble.combine(codes.sum(0, keepdims=True), times.sum(0, keepdims=True), np.array([len(specs)]))
    assert ms[0] == pytest.approx([f[0], b[0]], rel=1e-4)
    empty = ensemble.combine(np.zeros((1, ensemble.code_width)), np.zeros((1, 2)), np.array([0]))
    assert empty.tolist() == [[0.0, 0.0]]
    assert [x.tolist() for x in ensemble.predict([[]])] == [[0.0], [0.0]]
