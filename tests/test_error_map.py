"""bench/error_map.py: a model's signed error on stored cost data, binned."""
from __future__ import annotations

import numpy as np
import pandas as pd


def test_binned_gives_the_median_signed_error_and_count_per_file_and_bin(load_script) -> None:
    em = load_script("bench/error_map.py")
    rows = pd.DataFrame({"file": ["a"] * 4 + ["b"] * 2, "touched_mb": [0.5, 0.7, 2.0, 70.0, 0.5, 70.0],
                         "log_error": np.log([1.10, 1.20, 0.90, 0.80, 1.00, 0.50])})
    t = em.binned(rows, "touched_mb", em.TOUCHED_MB_EDGES)
    first, last = t.columns[0], t.columns[-1]  # (0, 1] MB and over 64 MB
    assert t.loc["a", first] == "+14.9% (2)"  # the median of 1.10 and 1.20 in log space
    assert t.loc["a", last] == "-20.0% (1)" and t.loc["b", last] == "-50.0% (1)"
    assert t.loc["b", t.columns[1]] == ""  # no set of b in (1, 4] MB


def test_a_file_is_split_only_where_the_model_learnt_from_it(load_script) -> None:
    em = load_script("bench/error_map.py")

    class Model:
        metadata = {"trained_on": "data/profiles/p/compute.parquet + compute-ranks.parquet + compute-hot-mixes.parquet"}

    assert em.trained_files(Model()) == {"compute.parquet", "compute-ranks.parquet", "compute-hot-mixes.parquet"}
    Model.metadata = {}
    assert em.trained_files(Model()) == set()


def test_on_bound_table_counts_bound_sets_and_both_errors_per_fifth(load_script) -> None:
    em = load_script("bench/error_map.py")
    ms = np.arange(1.0, 11.0)  # ten sets: two a fifth
    rows = pd.DataFrame({"file": "a", "measured_ms": ms, "log_error": np.log(np.full(10, 1.10)),
                         "on_bound": [False] * 8 + [True, True],
                         "log_error_unbounded": np.log([1.10] * 8 + [1.50, 1.50])})
    t = em.on_bound_table(rows)
    assert t["fifth"].tolist() == [1, 2, 3, 4, 5] and t["sets"].tolist() == [2] * 5
    top = t.iloc[-1]
    assert (top.on_bound, top.error, top.unbounded, top.median_ms) == (2, "+10.0%", "+50.0%", "9.5")
    assert t.iloc[0].on_bound == 0 and t.iloc[0].unbounded == "+10.0%"


def test_calibrated_mixes_are_not_divided(load_script) -> None:
    em = load_script("bench/error_map.py")
    assert em.CALIBRATED_SOURCES == {"hot-mix", "crowded-mix", "moderate-mix"}


def test_spread_table_bands_by_the_prediction_and_shows_a_one_sided_tail(load_script) -> None:
    em = load_script("bench/error_map.py")
    # five sets predicted 2.5 ms: four on the model, one label 2x slow (log error -0.69); one set at 30 ms
    rows = pd.DataFrame({"file": "a", "predicted_ms": [2.5] * 5 + [30.0],
                         "log_error": np.log([1.0, 1.0, 1.0, 1.0, 0.5, 1.2])})
    t = em.spread_table(rows).set_index("predicted ms")
    short = t.iloc[0]
    assert (short.sets, short["median"], short["beyond 15%"]) == (5, "+0.0%", "20%")
    assert short["mean"] == "-12.9%" and short["skew"].startswith("-")  # the slow label pulls the mean, not the median
    assert t.iloc[1]["sets"] == 1 and t.iloc[1]["beyond 15%"] == "100%"


def test_batch_table_keeps_gate_passing_sets_by_length_and_batch(load_script) -> None:
    em = load_script("bench/error_map.py")
    rows = pd.DataFrame({"file": "a", "split": "held out", "gate": ["passed", "passed", "failed", "n/a", "passed"],
                         "shards": [30, 30, 30, 3, 3], "batch": ["512", "512", "512", "512", "mixed"],
                         "log_error": np.log([0.80, 0.90, 0.10, 1.10, 1.00])})
    t = em.batch_table(rows).set_index(["length", "batch"])
    long = t.loc[(">= 16 shards", "512")]
    assert long.sets == 2 and long["mape"] == "15.0%"  # the failed set's -90% left out
    assert t.loc[("< 16 shards", "512")].sets == 1 and t.loc[("< 16 shards", "mixed")]["median"] == "+0.0%"


def test_quiet_gate_and_set_batch_read_the_rows_as_the_collector_wrote_them(load_script) -> None:
    from shardplan.cost.specs import ShardSpec
    em = load_script("bench/error_map.py")
    # the third row's collection predates the recorded limit: judged by the default one, 1.2x quiet
    meta = pd.DataFrame({"ref_before_ms": [1.0, 1.0, 1.3, 1.3], "ref_after_ms": [1.0, 2.0, 1.3, 1.3],
                         "quiet_ms": [1.0, 1.0, 1.0, 1.0], "slow_limit": [1.2, 1.2, np.nan, 1.5]})
    assert em.quiet_gate(meta) == ["passed", "failed", "failed", "passed"]
    assert em.quiet_gate(pd.DataFrame({"fwd_ms": [1.0]})) == ["n/a"]  # a file that keeps no gate record
    spec = lambda b: ShardSpec("t", 10, 0, 10, 4, 1.0, 0.0, b)  # noqa: E731
    assert em.set_batch([spec(512), spec(512)]) == "512" and em.set_batch([spec(512), spec(2048)]) == "mixed"
