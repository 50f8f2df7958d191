"""bench/instrument_agreement.py: the model against two instruments' consensus, and the instruments apart."""
from __future__ import annotations

import pandas as pd
import pytest

from shardplan.errors import InputError


def _pool(path, consensus: list[float], predicted: list[float]):
    pd.DataFrame({"task": ["t-0"] * len(consensus), "rank": range(len(consensus)), "predicted_ms": predicted,
                  "consensus_ms": consensus, "error": 0.0}).to_csv(path, index=False)
    return path


def test_counts_the_model_within_each_instrument_and_the_instruments_apart(load_script, tmp_path) -> None:
    agree = load_script("bench/instrument_agreement.py")
    predicted = [10.0, 10.0, 10.0, 10.0, 5.0]
    cal = _pool(tmp_path / "s-cal_ms.csv", [10.0, 12.0, 8.0, 12.0, 5.0], predicted)
    meas = _pool(tmp_path / "s-meas_ms.csv", [10.0, 10.5, 8.9, 12.0, 6.0], predicted)
    df = agree.paired(cal, meas)
    row = agree.summary(df)
    # rank 0 within both; rank 1 -16.7% by the calibrated figure, -4.8% by the other; rank 2 +25% / +12.4%;
    # rank 3 -16.7% by both; rank 4 within the calibrated figure, -16.7% by the label protocol
    assert row["ranks"] == 5
    assert row["model within, calibrated"] == 2 and row["model within, label protocol"] == 3
    assert row["model within both"] == 1 and row["model within either"] == 4
    assert row["instruments beyond 15%"] == 1 and row["instruments beyond 10%"] == 3  # ranks 4; 1, 2 and 4
    named = agree.summary(df, ("fit host", "guest"))  # the two files read as any two hosts or instruments
    assert named["model within, fit host"] == 2 and named["model within, guest"] == 3
    assert list(agree.model_errors(df, ("fit host", "guest")).columns) == ["error, fit host", "error, guest"]
    assert list(agree.ms_columns(("fit host", "guest")).values()) == ["fit_host_ms", "guest_ms"]
    other = _pool(tmp_path / "o-meas_ms.csv", [10.0] * 5, [9.0] * 5)  # another model's prices
    with pytest.raises(InputError, match="same model"):
        agree.paired(cal, other)


def test_a_pooled_file_without_the_columns_is_an_error_naming_it(load_script, tmp_path) -> None:
    agree = load_script("bench/instrument_agreement.py")
    good = _pool(tmp_path / "s-cal_ms.csv", [10.0, 12.0], [10.0, 10.0])
    wrong = tmp_path / "runs.csv"  # a single run's file, not a pooled one
    pd.DataFrame({"task": ["t-0"], "rank": [0], "pred_ms": [10.0], "meas_ms": [9.0]}).to_csv(wrong, index=False)
    with pytest.raises(InputError, match=r"runs\.csv lacks the column\(s\) predicted_ms, consensus_ms"):
        agree.paired(good, wrong)
    with pytest.raises(InputError, match="does not exist"):
        agree.paired(good, tmp_path / "missing.csv")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(InputError, match="not a readable CSV"):
        agree.paired(empty, good)
