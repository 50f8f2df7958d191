"""bench/rank_parts.py: a rank whole, its shards alone and its heaviest shard at other exponents."""
from __future__ import annotations

import pandas as pd
import pytest

from shardplan.cost.specs import ShardSpec


def _spec(table: str, alpha: float = 1.0) -> ShardSpec:
    return ShardSpec(table=table, table_rows=1000, row_offset=0, rows=1000, cols=8, pooling_factor=2.0,
                     zipf_alpha=alpha, batch_size=512)


def test_the_sets_timed_and_how_the_whole_compares_with_its_parts(load_script) -> None:
    mod = load_script("bench/rank_parts.py")
    rank = [_spec("a"), _spec("b", 1.3)]
    sets = mod.parts(rank, heaviest=1, alphas=[0.8])
    assert list(sets) == ["whole", "alone 0: a", "alone 1: b", "heaviest at alpha 0.8"]
    assert sets["whole"] == rank and sets["heaviest at alpha 0.8"] == [_spec("b", 0.8)]
    # the kernel: whole 11 ms over 2 + 8 alone (1.1x); the model: whole 9 over 2 + 8 (0.9x), b alone 10% low
    readings = pd.DataFrame({"rank": ["whole", "alone 0: a", "alone 1: b", "heaviest at alpha 0.8"] * 2,
                             "ms": [11.0, 2.0, 8.0, 12.0, 11.0, 2.0, 8.0, 12.0]})
    predicted = {"committed": {"whole": 9.0, "alone 0: a": 2.0, "alone 1: b": 7.2, "heaviest at alpha 0.8": 12.0}}
    t = mod.summary(readings, predicted).set_index("set")
    assert t.loc["alone 1: b", "committed error"] == pytest.approx(-0.1)
    assert t.loc["whole", "committed error"] == pytest.approx(9 / 11 - 1)
    assert t.loc["whole over the shards alone", "measured ms"] == pytest.approx(1.1)
    assert t.loc["whole over the shards alone", "committed ms"] == pytest.approx(9 / 9.2)
