"""bench/like_tables.py: N like tables whole against the same tables alone."""
from __future__ import annotations

import pandas as pd
import pytest

from shardplan.cost.specs import ShardSpec


def test_the_sets_timed_and_each_whole_over_its_tables_alone(load_script) -> None:
    mod = load_script("bench/like_tables.py")
    spec = ShardSpec("like", 1000, 0, 1000, 8, 2.0, 0.9, 512)
    sets = mod.like_sets(spec, [1, 3])
    assert list(sets) == ["n=1", "n=3", "alone 0", "alone 1", "alone 2"]
    assert [s.table for s in sets["n=3"]] == ["like-0", "like-1", "like-2"]  # each its own table: own hot rows
    assert sets["alone 1"] == [sets["n=3"][1]] and sets["n=1"] == sets["alone 0"]
    # the kernel: 3 tables whole 9 ms over 2 + 2 + 2 alone (1.5x); the model: 5 over 6 (0.83x)
    measured = pd.Series({"n=1": 2.0, "n=3": 9.0, "alone 0": 2.0, "alone 1": 2.0, "alone 2": 2.0})
    predicted = {"committed": {"n=1": 2.0, "n=3": 5.0, "alone 0": 2.0, "alone 1": 2.0, "alone 2": 2.0}}
    t = mod.summary(sets, measured, predicted).set_index("tables")
    assert t.loc[3, "whole / alone, measured"] == pytest.approx(1.5)
    assert t.loc[3, "whole / alone, committed"] == pytest.approx(5 / 6)
    assert t.loc[1, "whole / alone, measured"] == pytest.approx(1.0) and t.loc[3, "whole ms"] == 9.0
    assert t.loc[3, "touched MB"] == pytest.approx(3 * t.loc[1, "touched MB"], rel=0.05)
