"""bench/targeted_data.py and ``shardplan train --data-dir``: a candidate's data folder with a targeted
collection among the random sets."""
from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from shardplan.cli import main
from shardplan.cost.profiles import get_profile
from shardplan.errors import InputError

from conftest import ROOT


def _rows(seed: int, n: int, ref_ms: float = 1.0) -> pd.DataFrame:
    return pd.DataFrame({"seed": seed, "sample": range(n), "ref_before_ms": ref_ms, "ref_after_ms": ref_ms,
                         "quiet_ms": 1.0, "slow_limit": 1.2})


def test_targeted_sets_that_passed_the_gate_go_after_the_first_seed(load_script) -> None:
    mod = load_script("bench/targeted_data.py")
    base = pd.concat([_rows(0, 4), _rows(1, 2)], ignore_index=True)
    extra = pd.concat([_rows(3, 3), _rows(2, 2), _rows(2, 1, ref_ms=1.5).assign(sample=9)], ignore_index=True)
    out = mod.with_targeted(base, extra)
    assert list(zip(out.seed, out["sample"])) == [(0, 0), (0, 1), (0, 2), (0, 3), (2, 0), (2, 1),
                                                  (3, 0), (3, 1), (3, 2), (1, 0), (1, 1)]  # (2, 9) failed the gate
    assert list(mod.with_targeted(base, extra, seeds=[3]).seed) == [0] * 4 + [3] * 3 + [1] * 2
    with pytest.raises(InputError, match="--extra"):  # a seed of both files would hold two sets under one key
        mod.with_targeted(base, _rows(1, 2))


def test_a_collection_from_before_the_recorded_limit_is_gated_at_the_default_one(load_script) -> None:
    mod = load_script("bench/targeted_data.py")
    # cpu-2c's compute-large.parquet predates the slow_limit column: its rows were taken under 1.2x quiet
    old = pd.concat([_rows(5, 2), _rows(5, 1, ref_ms=1.3).assign(sample=7)], ignore_index=True).drop(
        columns="slow_limit")
    out = mod.with_targeted(_rows(0, 2), old)
    assert list(zip(out.seed, out["sample"])) == [(0, 0), (0, 1), (5, 0), (5, 1)]


def test_train_on_another_data_folder_needs_its_cost_data_and_an_out_folder(tmp_path, capsys) -> None:
    assert main(["train", "--profile", "cpu-2c", "--data-dir", str(tmp_path), "--out", str(tmp_path / "m")]) == 2
    assert "--data-dir: no compute.parquet" in capsys.readouterr().err and not (tmp_path / "m").exists()
    # its files may be links to the profile's committed ones: the model is never written into it by default
    assert main(["train", "--profile", "cpu-2c", "--data-dir", str(get_profile("cpu-2c").dir)]) == 2
    assert "--out: is needed with --data-dir" in capsys.readouterr().err


def test_bad_seeds_are_refused_before_anything_is_written(tmp_path) -> None:
    out = tmp_path / "d"
    run = subprocess.run([sys.executable, "bench/targeted_data.py", "--profile", "cpu-2c-zen4", "--extra",
                          "compute-big-tables.parquet", "--seeds", "2,x", "--out", str(out)],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 2 and "--seeds: must be comma-separated integers" in run.stderr and not out.exists()
