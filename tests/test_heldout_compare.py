"""bench/heldout_compare.py: several models scored on one held-out split of a profile's data."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from shardplan.cost.model import NeuralCostModel
from shardplan.cost.profiles import get_profile
from shardplan.cost.split import holdout_mask
from shardplan.cost.train import load_sets, reference_nominal

from conftest import ROOT


def test_every_model_is_scored_on_the_same_held_out_sets_as_labelled_and_as_timed(tmp_path) -> None:
    prof = get_profile("cpu-2c")
    data = tmp_path / "data"
    data.mkdir()
    pd.read_parquet(prof.dir / "compute.parquet").iloc[:300].to_parquet(data / "compute.parquet")
    other = prof.dir / "candidates" / "with-round2" / "compute-model.json"  # a candidate of the same profile
    run = subprocess.run([sys.executable, "bench/heldout_compare.py", "--profile", "cpu-2c", "--data-dir", str(data),
                          "--models", str(other), "--out", str(tmp_path), "--name", "t"],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    table = pd.read_csv(tmp_path / "heldout-compare-cpu-2c-t.csv")
    assert set(table.split) == {"held-out random sets"}  # no larger sets or plan ranks in this folder
    assert set(table.labels) == {"as labelled", "as timed"} and len(table) == 4
    held = int(holdout_mask(pd.read_parquet(data / "compute.parquet")).sum())
    assert (table.sets == held).all() and 0 < held < 300
    # the committed model's figure as labelled, recomputed here
    nominal = reference_nominal(pd.read_parquet(data / "compute.parquet"))
    sets, f, b, df = load_sets(data / "compute.parquet", nominal)
    keep = holdout_mask(df)
    model = NeuralCostModel.load(prof.dir / "compute-model.json", "cpu-2c")
    pf, pb = model.predict([s for s, k in zip(sets, keep) if k], random_level=model.random_level)
    mape = np.mean(np.abs((pf + pb) / (f + b)[keep] - 1))
    row = table[(table.labels == "as labelled") & (table.model == "data/profiles/cpu-2c/compute-model.json")]
    assert float(row["fwd+bwd MAPE"].item().rstrip("%")) == pytest.approx(100 * mape, abs=0.05)
    bad = subprocess.run([sys.executable, "bench/heldout_compare.py", "--profile", "cpu-2c", "--models",
                          str(tmp_path / "none.json")], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "--models" in bad.stderr


def test_larger_sets_are_scored_again_past_the_largest_set_the_model_learnt_from(tmp_path) -> None:
    prof = get_profile("cpu-2c")
    data = tmp_path / "data"
    data.mkdir()
    trained = pd.read_parquet(prof.dir / "compute.parquet").iloc[:200]
    trained.to_parquet(data / "compute.parquet")  # the only file the committed model names that is here
    large = pd.read_parquet(prof.dir / "compute-large.parquet").iloc[:30]
    # a "larger" file that also holds sets no larger than the largest trained on: only the rest are past it
    mixed = pd.concat([trained.iloc[:10], large], ignore_index=True)[large.columns]
    mixed.to_parquet(data / "compute-large.parquet")
    run = subprocess.run([sys.executable, "bench/heldout_compare.py", "--profile", "cpu-2c", "--data-dir", str(data),
                          "--out", str(tmp_path), "--name", "t"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    table = pd.read_csv(tmp_path / "heldout-compare-cpu-2c-t.csv")
    past = int(trained["num_shards"].max())
    beyond = table[table.split == f"larger sets, past {past} shards"]
    assert set(beyond.labels) == {"as labelled", "as timed"}
    assert (beyond.sets == int((mixed["num_shards"] > past).sum())).all()
    assert (table[table.split == "larger sets"].sets == 40).all()
    assert f"has {past} shards" in (tmp_path / "heldout-compare-cpu-2c-t.md").read_text()
