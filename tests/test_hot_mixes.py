"""Hot mixes: plan-rank-like sets around a large hot table, labelled by neighbour calibration
(``shardplan.cost.collect_hot``), and training on them (``train_and_report(hot_mixes=True)``)."""
import json

import numpy as np
import pandas as pd
import pytest

from shardplan.cost import collect_hot
from shardplan.cost.calibration import CalibratedTiming
from shardplan.cost.collect_hot import (CROWDED_ID_SEED, CROWDED_MAX_HELD, CROWDED_MAX_TOUCHED, CROWDED_SHARDS,
                                        HOT_MIN_POOLING, HOT_MIN_ROWS, MODERATE_ID_SEED, MODERATE_MAX_SHARD_TOUCHED,
                                        collect_hot_mixes, crowded_mix_sample, hot_mix_sample,
                                        moderate_mix_sample, suite_table_names)
from shardplan.cost.features import touched_bytes
from shardplan.cost.profiles import get_profile
from shardplan.cost.specs import specs_from_json, specs_to_json
from shardplan.cost.split import holdout_mask, is_holdout
from shardplan.cost.train import CROWDED_SPLIT, HOT_SPLIT, MODERATE_SPLIT, train_and_report
from shardplan.domain import Table
from shardplan.errors import InputError
from test_collect_and_models import _synthetic


def _pool() -> list[Table]:
    big = [Table(f"hot{i}", 2_000_000, 64, 30.0 + i, 0.7) for i in range(3)]
    big += [Table(f"cold{i}", 800_000, 64, 2.0 + i, 0.9) for i in range(4)]
    big += [Table(f"warm{i}", 900_000, 64, 12.0, 0.9) for i in range(2)]  # neither hot nor cold: never drawn
    return big + [Table(f"small{i}", 1000 * (i + 1), 64, 5.0, 1.0) for i in range(10)]


def _cost_frames(sets, fwd, bwd):
    """A builder of cost-data frames (the columns training reads) of the synthetic sets ``idx``, under a
    collector ``seed``, labelled as random sets timed on a quiet reference."""
    return lambda idx, seed: pd.DataFrame({
        "seed": seed, "sample": range(len(idx)), "source": "random", "num_shards": [len(sets[i]) for i in idx],
        "shards": [specs_to_json(sets[i]) for i in idx], "fwd_ms": fwd[idx], "bwd_ms": bwd[idx],
        "ref_before_ms": 1.0, "ref_after_ms": 1.0, "cpu_model": "x", "cpu_cores": 2, "torch": "t",
        "fbgemm_gpu": "f", "threads": 1, "optimizer": "sgd"})


def test_a_hot_mix_holds_a_wide_hot_table_cold_large_ones_and_small_ones():
    prof = get_profile("cpu-2c-xeon")
    for i in range(20):
        specs = hot_mix_sample(np.random.default_rng([0, i]), _pool(), prof)
        assert specs == hot_mix_sample(np.random.default_rng([0, i]), _pool(), prof)  # seeded
        first = specs[0]
        assert first.table.startswith("hot") and first.cols >= 64 and first.rows == prof.max_rows
        assert first.pooling_factor >= HOT_MIN_POOLING and first.table_rows >= min(HOT_MIN_ROWS, prof.max_rows)
        names = [s.table for s in specs]
        assert len(set(names)) == len(names) and not any(n.startswith("warm") for n in names)
        assert sum(n.startswith("cold") for n in names) >= 1 and sum(n.startswith("small") for n in names) >= 3
        assert len({s.batch_size for s in specs}) == 1
        assert all(s.row_offset == 0 and s.rows == s.table_rows for s in specs)  # whole tables
    with pytest.raises(ValueError, match="large hot"):
        hot_mix_sample(np.random.default_rng(0), [t for t in _pool() if not t.name.startswith("hot")], prof)


def test_a_crowded_mix_holds_many_whole_tables_half_large_within_its_budgets():
    prof = get_profile("cpu-2c-xeon")
    pool = _pool() + [Table(f"big{i}", 1_000_000, 64, 4.0 + i, 1.0) for i in range(30)]
    sizes = []
    for i in range(20):
        specs = crowded_mix_sample(np.random.default_rng([0, i]), pool, prof)
        assert specs == crowded_mix_sample(np.random.default_rng([0, i]), pool, prof)  # seeded
        names = [s.table for s in specs]
        assert len(set(names)) == len(names) and len({s.batch_size for s in specs}) == 1
        assert all(s.row_offset == 0 and s.rows == s.table_rows for s in specs)  # whole tables
        assert touched_bytes(specs) <= CROWDED_MAX_TOUCHED
        assert sum(s.rows * s.cols * 4 for s in specs) <= CROWDED_MAX_HELD
        assert len(specs) <= CROWDED_SHARDS[1] and any(s.table_rows >= HOT_MIN_ROWS for s in specs)
        sizes.append(len(specs))
    assert max(sizes) >= 15 and min(sizes) >= 3  # many tables, where the random sets' budgets admit few large ones
    with pytest.raises(ValueError, match="large and smaller"):
        crowded_mix_sample(np.random.default_rng(0), [t for t in pool if t.num_embeddings < HOT_MIN_ROWS], prof)


def test_moderate_mixes_are_many_tables_that_fit_the_cache_one_by_one_and_not_together():
    prof = get_profile("cpu-2c-xeon")
    pool = _pool() + [Table(f"mid{i}", 100_000 * (i + 1), 64, 5.0 + i, 0.9) for i in range(40)]
    sets = [moderate_mix_sample(np.random.default_rng([0, i]), pool, prof) for i in range(20)]
    assert sets[3] == moderate_mix_sample(np.random.default_rng([0, 3]), pool, prof)  # seeded
    for specs in sets:
        names = [s.table for s in specs]
        assert len(set(names)) == len(names) and len({s.batch_size for s in specs}) == 1
        assert all(s.row_offset == 0 and s.rows == s.table_rows for s in specs)  # whole tables
        assert all(touched_bytes([s]) <= MODERATE_MAX_SHARD_TOUCHED for s in specs)
        assert touched_bytes(specs) <= CROWDED_MAX_TOUCHED and len(specs) <= CROWDED_SHARDS[1]
    # together they touch what none does alone: most sets past twice the per-table limit
    assert np.median([touched_bytes(s) for s in sets]) > 2 * MODERATE_MAX_SHARD_TOUCHED
    assert np.median([len(s) for s in sets]) >= 10


def test_suite_table_names_strip_the_task_prefix(tmp_path):
    for name, tables in (("a.json", ["t00_meta497", "t01_kaggle07"]), ("b.json", ["t12_meta001"])):
        (tmp_path / name).write_text(json.dumps({"tables": [{"name": t} for t in tables]}))
    assert suite_table_names([tmp_path]) == {"meta497", "kaggle07", "meta001"}


def test_labels_are_the_calibrated_times_and_collection_resumes(tmp_path, monkeypatch):
    """The label is raw / the neighbours' factor; the raw times, factor and neighbours are kept; a second
    call adds only the missing samples."""
    calls = []

    def fake(specs, optimizer, dtype, id_seed, profile, visits, passes):
        calls.append(id_seed)
        return CalibratedTiming(raw_fwd_ms=3.0, raw_bwd_ms=6.0, reference_slowdown=1.1, factor=1.5,
                                neighbours=(4, 2), passes=2)

    monkeypatch.setattr(collect_hot, "calibrated_timing", fake)
    prof, out = get_profile("cpu-2c-xeon"), tmp_path / "hot.parquet"
    df = collect_hot_mixes(prof, _pool(), out, 2, seed=3)
    assert len(df) == 2 and list(df["fwd_ms"]) == pytest.approx([2.0, 2.0])
    assert df["bwd_ms"].iloc[0] == pytest.approx(4.0)
    assert df["raw_bwd_ms"].iloc[0] == 6.0 and list(df["neighbours"].iloc[0]) == [4, 2]
    assert (df["source"] == "hot-mix").all() and df["profile"].iloc[0] == "cpu-2c-xeon"
    assert specs_from_json(df["shards"].iloc[1]) == hot_mix_sample(np.random.default_rng([3, 1]), _pool(), prof)
    df = collect_hot_mixes(prof, _pool(), out, 3, seed=3)
    assert len(df) == 3 and sorted(df["sample"]) == [0, 1, 2] and len(calls) == 3 and len(set(calls)) == 3
    crowded = collect_hot_mixes(prof, _pool(), tmp_path / "crowded.parquet", 1, seed=3, recipe="crowded")
    assert (crowded["source"] == "crowded-mix").all() and calls[-1] == CROWDED_ID_SEED
    assert specs_from_json(crowded["shards"].iloc[0]) == crowded_mix_sample(np.random.default_rng([3, 0]), _pool(),
                                                                            prof)
    moderate = collect_hot_mixes(prof, _pool(), tmp_path / "moderate.parquet", 1, seed=3, recipe="moderate")
    assert (moderate["source"] == "moderate-mix").all() and calls[-1] == MODERATE_ID_SEED


def test_training_with_hot_mixes_holds_some_out_and_names_the_flag(tmp_path):
    prof = get_profile("cpu-2c")
    frame = _cost_frames(*_synthetic(80))
    frame(np.arange(60), 3).to_parquet(tmp_path / "compute.parquet")
    with pytest.raises(InputError, match="hot"):
        train_and_report(prof, epochs=2, data_dir=tmp_path, progress=False, hot_mixes=True)
    frame(np.arange(60, 80), 9).assign(source="hot-mix").to_parquet(tmp_path / "compute-hot-mixes.parquet")
    meta = train_and_report(prof, epochs=2, data_dir=tmp_path, progress=False, hot_mixes=True)
    held = sum(is_holdout(9, i) for i in range(20))
    assert meta["command"].endswith("--hot-mixes") and "compute-hot-mixes" in meta["trained_on"]
    assert held and meta["evaluation"][HOT_SPLIT]["n"] == held and meta["holdout_hot_mixes"] == held
    assert meta["train_hot_mixes"] == 20 - held
    frame(np.arange(60, 80), 9).assign(source="crowded-mix").to_parquet(tmp_path / "compute-crowded-mixes.parquet")
    meta = train_and_report(prof, epochs=2, data_dir=tmp_path, progress=False, hot_mixes=True, crowded_mixes=True)
    assert meta["command"].endswith("--hot-mixes --crowded-mixes") and "compute-crowded-mixes" in meta["trained_on"]
    assert meta["evaluation"][CROWDED_SPLIT]["n"] == held == meta["holdout_crowded_mixes"]
    frame(np.arange(60, 80), 9).assign(source="moderate-mix").to_parquet(tmp_path / "compute-moderate-mixes.parquet")
    meta = train_and_report(prof, epochs=2, data_dir=tmp_path, progress=False, moderate_mixes=True)
    assert meta["command"].endswith("--moderate-mixes") and "compute-moderate-mixes" in meta["trained_on"]
    assert meta["evaluation"][MODERATE_SPLIT]["n"] == held == meta["holdout_moderate_mixes"]


def test_plan_ranks_join_training_copy_after_copy_and_long_ones_more(tmp_path, monkeypatch):
    """Without ``long_ranks`` the kept plan ranks follow the random sets as whole copies, RANK_SAMPLE_WEIGHT
    of them in file order (the committed recipe's order, which its weights depend on); with it the long
    ones come back in further copies."""
    from shardplan.cost import train

    prof = get_profile("cpu-2c")
    frame = _cost_frames(*_synthetic(100))
    frame(np.arange(60), 3).to_parquet(tmp_path / "compute.parquet")
    ranks = frame(np.arange(60, 100), 11).assign(source="plan-rank", task=[f"t{i % 5}" for i in range(40)])
    ranks.to_parquet(tmp_path / "compute-ranks.parquet")
    seen: dict[bool, list] = {}

    class Stop(Exception):
        pass

    def capture(self, sets_, f, b, **kw):
        seen[long_ranks] = list(f)
        raise Stop

    monkeypatch.setattr(train.NeuralCostModel, "fit", capture)
    for long_ranks in (False, True):
        with pytest.raises(Stop):
            train.train_and_report(prof, epochs=1, data_dir=tmp_path, progress=False, long_ranks=long_ranks)
    kept = ranks[~holdout_mask(ranks)]
    label = kept.fwd_ms.to_numpy()
    n_random = len(seen[False]) - train.RANK_SAMPLE_WEIGHT * len(kept)
    assert seen[False][n_random:] == list(label) * train.RANK_SAMPLE_WEIGHT
    weights = train.rank_weights((kept.fwd_ms + kept.bwd_ms).to_numpy(), long_ranks=True)
    extra = weights.sum() - train.RANK_SAMPLE_WEIGHT * len(kept)
    assert extra > 0  # some of the synthetic ranks are long
    assert seen[True][:len(seen[False])] == seen[False] and len(seen[True]) == len(seen[False]) + extra


def test_committed_crowded_and_moderate_mixes_are_what_the_seeded_draws_give():
    from conftest import ROOT
    from shardplan.cli import COLLECT_POOLS
    from shardplan.pools import load_pool

    prof = get_profile("cpu-2c-xeon")
    for recipe, draw, suites in (("crowded", crowded_mix_sample, "abc"), ("moderate", moderate_mix_sample, "abcd")):
        held_out = suite_table_names([ROOT / "data" / "tasks" / f"unseen-{x}" for x in suites])
        pool = [t for name in COLLECT_POOLS for t in load_pool(name) if t.name not in held_out]
        rows = pd.read_parquet(prof.dir / f"compute-{recipe}-mixes.parquet", columns=["seed", "sample", "shards"])
        for seed, sample, shards in rows.head(12).itertuples(index=False):
            assert draw(np.random.default_rng([int(seed), int(sample)]), pool, prof) == specs_from_json(shards)
