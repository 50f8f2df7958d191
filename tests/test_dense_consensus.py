"""bench/dense_consensus.py: short ranks take their dense median, long ones their pooled consensus."""
from __future__ import annotations

import pandas as pd
import pytest

from shardplan.errors import InputError


def _drift(path, readings: dict[str, list[float]]):
    rows = [{"rep": i, "rank": r, "id_seed": 101, "raw_ms": ms, "slowdown": 1.0, "ms": ms}
            for r, values in readings.items() for i, ms in enumerate(values)]
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_short_ranks_take_the_median_of_their_own_readings(load_script, tmp_path) -> None:
    dense = load_script("bench/dense_consensus.py")
    pooled = pd.DataFrame({"task": ["t-0", "t-0", "t-1"], "rank": [0, 1, 0],
                           "predicted_ms": [6.0, 20.0, 5.0], "consensus_ms": [5.0, 16.0, 5.2]})
    # t-0 rank 0: own readings 5.8, 6.2, 5.6 (median 5.8); its neighbour's 1.0s must not count
    drift = {"t-0": _drift(tmp_path / "a.csv", {"0": [5.8, 6.2, 5.6], "r0/n7": [1.0, 1.0, 1.0]}),
             "t-1": _drift(tmp_path / "b.csv", {"0": [4.0, 4.1, 4.2, 9.0]})}
    df = dense.combined(pooled, dense.dense_medians(drift), short_ms=10.0).set_index(["task", "rank"])
    assert df.loc[("t-0", 0), "reference_ms"] == pytest.approx(5.8) and df.loc[("t-0", 0), "readings"] == 3
    assert bool(df.loc[("t-0", 0), "within"])  # +3.4% of the dense median; +20% of the pooled consensus
    assert df.loc[("t-0", 1), "reference_ms"] == 16.0 and not df.loc[("t-0", 1), "within"]  # long: +25% pooled
    assert df.loc[("t-1", 0), "reference_ms"] == pytest.approx(4.15)
    assert not df.loc[("t-1", 0), "within"]  # +20.5%
    with pytest.raises(InputError, match="t-1 r0"):  # a short rank with no dense readings is an error
        dense.combined(pooled, dense.dense_medians({"t-0": drift["t-0"]}), short_ms=10.0)


def test_a_readings_file_without_rank_or_ms_is_an_error_naming_it(load_script, tmp_path) -> None:
    dense = load_script("bench/dense_consensus.py")
    pooled_file = tmp_path / "pooled.csv"  # a pooled file passed where the readings go
    pd.DataFrame({"task": ["t-0"], "rank": [0], "predicted_ms": [6.0], "consensus_ms": [5.0]}).to_csv(pooled_file)
    with pytest.raises(InputError, match=r"pooled\.csv lacks the column\(s\) ms"):
        dense.dense_medians({"t-0": pooled_file})
    with pytest.raises(InputError, match="does not exist"):
        dense.dense_medians({"t-0": tmp_path / "missing.csv"})
