"""bench/rank_drift.py: a rank the host moves under, told from a steady one."""
from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pandas as pd
import pytest

from shardplan.cost.profiles import get_profile
from shardplan.errors import InputError

from conftest import ROOT


def test_a_drifting_rank_is_told_from_a_steady_one(load_script) -> None:
    drift = load_script("bench/rank_drift.py")
    # rank 0 drifts by turn (10, 12, 14 ms over three turns); rank 1 reads 5 ms every time; the
    # reference reads 1.25x quiet throughout, which the figures are divided by
    turn = {"n": 0}

    def timer(specs, optimizer, dtype, device, seed, warmup, repeats, quiet_ms):
        rank = specs[0]
        ms = 5.0 if rank == "steady" else 10.0 + 2.0 * (turn["n"] // 6)
        turn["n"] += 1
        return SimpleNamespace(timing=SimpleNamespace(fwd_ms=1.25 * ms / 3, bwd_ms=1.25 * 2 * ms / 3),
                               ref_before_ms=1.25 * quiet_ms, ref_after_ms=1.25 * quiet_ms)

    sets = {0: drift.TimedSet(["drifting"], "sgd", "fp32"), 1: drift.TimedSet(["steady"], "sgd", "fp32")}
    df = drift.time_in_turns(sets, get_profile("cpu-2c"), 2.0, reps=3, pause_s=0.0, timer=timer)
    assert len(df) == 3 * 2 * len(drift.ID_SEEDS) and set(df.id_seed) == set(drift.ID_SEEDS)
    df["predicted_ms"] = df["rank"].map({0: 12.0, 1: 4.0})
    s = drift.drift_summary(df, {0: 1, 1: 1}).set_index("rank")
    assert s.loc[0, "median_ms"] == pytest.approx(12.0) and s.loc[0, "error"] == pytest.approx(0.0)
    assert (s.loc[0, "turn_min_ms"], s.loc[0, "turn_max_ms"]) == pytest.approx((10.0, 14.0))
    # 12 is 20% over the first turn's 10 ms and 14% under the last turn's 14: two turns of three within 15%
    assert s.loc[0, "within_15"] == pytest.approx(2 / 3)
    assert s.loc[1, "turn_max_ms"] == pytest.approx(s.loc[1, "turn_min_ms"])
    assert s.loc[1, "error"] == pytest.approx(-0.2)


def test_neighbours_put_a_rank_on_the_labels_scale_and_show_how_it_follows_them(load_script) -> None:
    drift = load_script("bench/rank_drift.py")
    # the host slows the stored neighbours by 1.0, 1.2, 1.5 over three turns; the rank moves as
    # their slowdown to the power 1.5 (it is more sensitive than they are)
    slow = {0: 1.0, 1: 1.2, 2: 1.5}
    labels = {drift.neighbour_key(0, 7): 10.0, drift.neighbour_key(0, 9, "u"): 30.0}
    rows = [{"rank": key, "rep": rep, "raw_ms": label * f} for rep, f in slow.items() for key, label in labels.items()]
    rows += [{"rank": 0, "rep": rep, "raw_ms": 20.0 * f ** 1.5} for rep, f in slow.items()]
    turns = drift.calibrated_turns(pd.DataFrame(rows), {0: tuple(labels)}, labels)
    assert turns["factor"].tolist() == pytest.approx([1.0, 1.2, 1.5])
    assert turns["calibrated_ms"].tolist() == pytest.approx([20.0 * f ** 0.5 for f in slow.values()])
    s = drift.follow_summary(turns, {0: 20.0}).set_index("rank")
    assert s.loc[0, "slope"] == pytest.approx(1.5)
    assert s.loc[0, "calibrated_ms"] == pytest.approx(20.0 * 1.2 ** 0.5)
    assert s.loc[0, "error"] == pytest.approx(1.2 ** -0.5 - 1)
    assert (s.loc[0, "factor_min"], s.loc[0, "factor_max"]) == pytest.approx((1.0, 1.5))


def test_the_model_on_a_ranks_neighbours_is_its_price_of_them_over_their_labels(load_script) -> None:
    drift = load_script("bench/rank_drift.py")
    labels = {"r0/n1": 10.0, "r0/n2": 20.0, "r3/n4": 5.0}
    modelled = {"r0/n1": 12.0, "r0/n2": 30.0, "r3/n4": 4.0}  # 1.2x and 1.5x one rank's labels, 0.8x the other's
    over = drift.model_over_labels({0: ("r0/n1", "r0/n2"), 3: ("r3/n4",)}, labels, modelled)
    assert over[0] == pytest.approx((1.2 * 1.5) ** 0.5)
    assert over[3] == pytest.approx(0.8)


def test_the_gate_shift_reads_both_neighbour_sets_off_a_report(load_script, tmp_path) -> None:
    shift = load_script("bench/gate_shift.py")
    report = tmp_path / "rank-drift-x.md"
    report.write_text("\n".join([
        "# How far the timing of torchrec's ranks 2,5 of `unseen-d-23` drifts", "",
        "| rank | shards | predicted ms | median measured ms |", "| --- | --- | --- | --- |",
        "| 2 | 11 | 8.46 | 5.58 |", "",
        "Against each rank's 6 calibration neighbours (labelled stored ranks that passed the quiet gate, ...):", "",
        "| rank | predicted ms | median calibrated ms | model error |", "| --- | --- | --- | --- |",
        "| 2 | 8.46 | 7.18 | +17.8% |", "| 5 | 9.00 | 9.50 | -5.3% |", "",
        "Against each rank's 6 neighbours as chosen before 2026-11-29 (...):", "",
        "| rank | predicted ms | median calibrated ms | model error |", "| --- | --- | --- | --- |",
        "| 2 | 8.46 | 6.62 | +27.7% |", "| 5 | 9.00 | 9.50 | -5.3% |", "",
        "Every reading:", "", "| 2 | 1.0 | 2.0 |"]))
    assert shift.drift_shifts(report) == {("unseen-d-23", 2): (7.18, 6.62), ("unseen-d-23", 5): (9.5, 9.5)}
    report.write_text("# How far the timing of torchrec's ranks 2 of `unseen-d-23` drifts\n")  # no --ungated-too
    with pytest.raises(InputError, match="--ungated-too"):
        shift.drift_shifts(report)


def test_a_bad_rank_list_is_refused_before_anything_is_written(tmp_path) -> None:
    run = subprocess.run([sys.executable, "bench/rank_drift.py", "--task", "data/tasks/unseen-d/unseen-d-13.json",
                          "--ranks", "5,x", "--profile", "cpu-2c-zen4", "--out", str(tmp_path / "r")],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 2 and "--ranks: must be comma-separated integers" in run.stderr
    assert not (tmp_path / "r").exists()
