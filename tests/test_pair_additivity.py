"""bench/pair_additivity.py: what each shard adds to its rank, measured against predicted."""
from __future__ import annotations

import numpy as np
import pytest

from shardplan.cost.specs import ShardSpec
from shardplan.errors import InputError


def test_margins_take_each_shard_out_within_a_repetition(load_script) -> None:
    pa = load_script("bench/pair_additivity.py")
    a, b = (ShardSpec(t, 1000, 0, 1000, 16, 4.0, 1.0, 512) for t in ("a", "b"))
    # two repetitions, the second on a host 2x slower: a alone 2 ms, b alone 1 ms, together 4 ms (they slow
    # one another: each adds more than its time alone)
    measured = {"rank": np.array([4.0, 8.0]), "without: a": np.array([1.0, 2.0]), "without: b": np.array([2.0, 4.0]),
                "alone: a": np.array([2.0, 4.0]), "alone: b": np.array([1.0, 2.0])}
    predicted = {"rank": 3.0, "without: a": 1.0, "without: b": 2.0}
    beside = {"without: a": measured["rank"], "without: b": measured["rank"]}
    t = pa.margins([a, b], measured, beside, predicted).set_index("shard")
    assert t.loc["a", "measured_ms"] == pytest.approx(4.5)  # median of 3 and 6
    assert t.loc["a", "measured share"] == pytest.approx(0.75) and t.loc["b", "measured share"] == pytest.approx(0.5)
    assert t.loc["a", "predicted_ms"] == pytest.approx(2.0) and t.loc["a", "predicted share"] == pytest.approx(2 / 3)
    assert t.loc["a", "measured alone share"] == pytest.approx(0.5)
    assert t["measured share"].sum() > 1.0  # the two slow one another


def test_leave_one_out_sets_come_in_blocks_that_fit_in_memory(load_script, monkeypatch) -> None:
    pa = load_script("bench/pair_additivity.py")
    gib = 2**30
    shard = lambda t: ShardSpec(t, gib // 64, 0, gib // 64, 16, 4.0, 1.0, 512)  # noqa: E731  (1 GiB each)
    without = {f"without: {i}": [shard(f"{i}{j}")] * 2 for i, j in zip("abcd", "wxyz")}  # 2 GiB each
    resident = [[shard("r")]]  # 1 GiB held throughout
    monkeypatch.setattr(pa, "available_memory_gb", lambda: 7.0 / pa.MEMORY_SHARE)  # room for 7 GiB in all
    assert pa.blocks(resident, without) == [["without: a", "without: b", "without: c"], ["without: d"]]
    monkeypatch.setattr(pa, "available_memory_gb", lambda: 2.5 / pa.MEMORY_SHARE)  # not even one beside the rank
    with pytest.raises(InputError, match="does not fit"):
        pa.blocks(resident, without)
    monkeypatch.setattr(pa, "available_memory_gb", lambda: None)
    assert pa.blocks(resident, without) == [list(without)]
