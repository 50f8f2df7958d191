"""bench/plan_accuracy.py: a run resumes from the tasks an earlier start of the same command finished."""
from __future__ import annotations

import argparse
import json
import math

import numpy as np
import pytest

from shardplan.errors import InputError
from shardplan.formats import write_json_atomic


def _args(**over) -> argparse.Namespace:
    base = {"suite": "data/tasks/unseen-b", "profile": "cpu-2c-nested", "searcher": "torchrec", "rounds": 2,
            "visits": 4, "optimizer": None, "calibrate": True, "name": "x", "out": "bench/results", "wait_fit": 10.0}
    return argparse.Namespace(**{**base, **over})


def test_a_partial_run_resumes_only_under_the_same_protocol(load_script, tmp_path) -> None:
    pa = load_script("bench/plan_accuracy.py")
    partial = tmp_path / "run.partial.json"
    assert pa.resumed_rows(partial, _args()) == []  # nothing to resume
    rows = [{"task": "unseen-b-00", "rank": 0, "cal_fwd_ms": np.float64(1.5), "fit_tilt": float("nan")}]
    write_json_atomic(partial, {"options": {k: getattr(_args(), k) for k in pa.RESUME_KEYS}, "rows": rows})
    back = pa.resumed_rows(partial, _args(wait_fit=30.0, name="y"))  # the wait and the name are not the protocol
    assert back[0]["cal_fwd_ms"] == 1.5 and math.isnan(back[0]["fit_tilt"]) and back[0]["task"] == "unseen-b-00"
    with pytest.raises(InputError, match=r"--name: .*other rounds, visits \(rounds=2, visits=4\)"):
        pa.resumed_rows(partial, _args(rounds=1, visits=1))
    partial.write_text(json.dumps({"rows": []})[:-3])
    with pytest.raises(InputError, match="not a partial run"):
        pa.resumed_rows(partial, _args())
