"""bench/probe_vs_gap.py: each task's probe beside its calibrated gap to the other runs' consensus."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from shardplan.cost.specs import ShardSpec
from shardplan.errors import InputError

RANKS = {("t-0", 0): [ShardSpec("a", 100, 0, 100, 8, 2.0, 0.5, 64)],
         ("t-0", 1): [ShardSpec("b", 200, 0, 200, 16, 1.0, 0.5, 64)],
         ("t-0", 2): [ShardSpec("c", 50, 0, 50, 4, 1.0, 0.5, 64)]}


def _run(pvg, ms: list[float], label_ratio: float = 1.0, reference: float = 1.05) -> pd.DataFrame:
    keys = list(RANKS)
    return pd.DataFrame({"task": [k[0] for k in keys], "rank": [k[1] for k in keys],
                         "rank_signature": [pvg.rank_signature(RANKS[k]) for k in keys],
                         "cal_fwd_ms": [m / 2 for m in ms], "cal_bwd_ms": [m / 2 for m in ms],
                         "cal_reference_slowdown": reference, "cal_round_spread": 1.02,
                         "fit_label_ratio": label_ratio, "fit_reference": reference, "fit_tilt": 1.0})


def test_a_task_is_held_against_the_others_on_its_long_unmoved_ranks(load_script) -> None:
    pvg = load_script("bench/probe_vs_gap.py")
    idx = pd.MultiIndex.from_tuples(list(RANKS))
    pool = pd.DataFrame({"a": [20.0, 30.0, 5.0], "b": [20.0, 30.0, 5.0], "c": [40.0, 30.0, 5.0]}, index=idx)
    # c's own figures would pull the consensus; left out, rank 0's is 20 and rank 1 is excluded (moved by the gate)
    run = _run(pvg, [22.0, 60.0, 9.0], label_ratio=0.6, reference=3.0)
    [row] = pvg.task_gaps(run, "c", pool, RANKS, excluded={("t-0", 1)}, short_ms=10.0)
    assert row["ranks"] == 1 and row["gap_median"] == pytest.approx(0.1) and row["gap_signed"] == pytest.approx(0.1)
    assert not row["fit"] and row["cal_reference"] == 3.0  # the probe read 0.6x the labels: unfit
    other_plan = run.assign(rank_signature="x")  # a plan TorchRec no longer makes is not compared
    assert pvg.task_gaps(other_plan, "c", pool, RANKS, set(), 10.0) == []
    table = pd.DataFrame([row, {**row, "run": "d", "fit": True, "gap_median": 0.02}])
    summary = pvg.per_run(table)
    assert list(summary["probe passed"]) == [0, 1] and list(summary["median gap"]) == pytest.approx([0.1, 0.02])


def test_a_partial_run_is_read_and_a_wrong_one_refused(load_script, tmp_path) -> None:
    pvg = load_script("bench/probe_vs_gap.py")
    good = tmp_path / "r.partial.json"
    good.write_text(json.dumps({"options": {}, "rows": _run(pvg, [1.0, 2.0, 3.0]).to_dict("records")}))
    assert len(pvg.read_run(good)) == 3
    bad = tmp_path / "s.partial.json"
    bad.write_text(json.dumps({"options": {}, "rows": [{"task": "t-0"}]}))
    with pytest.raises(InputError, match="--runs: .* lacks rank"):
        pvg.read_run(bad)
    with pytest.raises(InputError, match="not in"):
        pvg.suite_of("unseen-z-00", tmp_path)
