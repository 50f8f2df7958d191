"""bench/finetune_groups.py: a model learns one collection's ratios within its groups and keeps the rest."""
from __future__ import annotations

import copy

import numpy as np

from shardplan.cost.model import NeuralCostModel
from shardplan.cost.specs import ShardSpec


def _sets(n: int, seed: int) -> list[list[ShardSpec]]:
    rng = np.random.default_rng(seed)
    return [[ShardSpec(f"t{i}", int(r), 0, int(r), int(c), float(p), 1.0, 512)]
            for i, (r, c, p) in enumerate(zip(rng.integers(1_000, 200_000, n), rng.choice([8, 16, 32, 64], n),
                                              rng.uniform(1, 20, n)))]


def _ms(sets: list[list[ShardSpec]]) -> np.ndarray:
    return np.array([0.05 + 1e-5 * s[0].cols * s[0].pooling_factor * 512 for s in sets])


def _within_group_error(model: NeuralCostModel, sets, fwd, groups) -> float:
    err = np.log(model.predict(sets)[0] / fwd)
    return float(np.std(np.concatenate([err[groups == g] - err[groups == g].mean() for g in np.unique(groups)])))


def test_finetune_learns_the_groups_ratios_while_the_anchor_holds_the_rest(load_script) -> None:
    ft = load_script("bench/finetune_groups.py")
    train = _sets(60, 0)
    base = NeuralCostModel("cpu-2c", epochs=40, hidden=16, code=8, group_tilt=False).fit(
        train, _ms(train), 2 * _ms(train), progress=False)
    # the day's groups: 6 plans of 4 ranks whose ratios differ from the model's by a lasting +-20%
    day = _sets(24, 1)
    groups = np.repeat(np.arange(6), 4)
    noise = np.exp(np.random.default_rng(2).normal(0.0, 0.2, 24))
    fwd = base.predict(day)[0] * noise * np.repeat([1, 3, 0.5, 2, 1, 1], 4)
    before = _within_group_error(base, day, fwd, groups)
    anchor = _sets(40, 3)
    moved = {}
    for weight in (0.0, 1.0):
        m = ft.finetune(copy.deepcopy(base), day, fwd, 2 * fwd, groups, anchor, steps=300, lr=1e-2,
                        anchor_weight=weight, log=lambda _: None)
        moved[weight] = float(np.abs(np.log(m.predict(anchor)[0] / base.predict(anchor)[0])).mean())
        # the groups' own levels (x3, x0.5, ...) are not labels: only the ratios within them are learnt
        assert _within_group_error(m, day, fwd, groups) < 0.5 * before
    assert moved[1.0] < 0.2 * moved[0.0]  # the anchored model's other predictions barely move
