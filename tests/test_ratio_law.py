"""bench/ratio_law.py: the law of measured over predicted ratios, on bench CSVs made to follow one."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest


def _bench_csv(path, slope: float, default_factor: float, seed: int = 0):
    """A bench CSV where every plan measures TorchRec's cost times (predicted ratio) ** slope, the
    default's plans ``default_factor`` times more."""
    rng = np.random.default_rng(seed)
    rows = []
    for t in range(12):
        task = f"t{t:02d}"
        rows.append({"task": task, "searcher": "torchrec", "valid": True, "predicted_ms": 20.0, "measured_ms": 25.0})
        for searcher, factor in (("neuroshard", default_factor), ("greedy-size", 1.0), ("greedy-dim", 1.0)):
            ratio = float(np.exp(rng.normal(0.0, 0.2)))
            rows.append({"task": task, "searcher": searcher, "valid": True, "predicted_ms": 20.0 * ratio,
                         "measured_ms": 25.0 * ratio ** slope * factor})
    rows.append({"task": "t99", "searcher": "neuroshard", "valid": True, "predicted_ms": 5.0, "measured_ms": 5.0})
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_the_law_is_recovered_and_the_default_residual_read_off_it(load_script, tmp_path) -> None:
    law = load_script("bench/ratio_law.py")
    exact = law.run_row(_bench_csv(tmp_path / "exact.csv", slope=0.7, default_factor=1.0))
    assert exact["tasks"] == 12 and exact["plans"] == 36  # a task TorchRec does not plan is left out
    assert exact["slope"] == pytest.approx(0.7, abs=1e-6) and exact["intercept"] == pytest.approx(0.0, abs=1e-6)
    assert exact["default_residual"] == pytest.approx(1.0, abs=1e-6)
    assert exact["predicted_needed_for_0.85"] == pytest.approx(0.85 ** (1 / 0.7), rel=1e-6)

    worse = law.run_row(_bench_csv(tmp_path / "worse.csv", slope=0.7, default_factor=1.06))
    assert worse["default_residual"] > 1.03 and worse["greedy_residual"] < 1.0
    assert worse["predicted_needed_for_0.85"] < exact["predicted_needed_for_0.85"]
