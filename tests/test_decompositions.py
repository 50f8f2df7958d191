"""Decompositions: sets timed whole and shard by shard in the same repetitions, and the model learning
their ratios (``shardplan.cost.collect_decomp``, ``NeuralCostModel.fit(decompositions=...)``)."""
import dataclasses

import numpy as np
import pandas as pd
import pytest

from shardplan.cost.collect_decomp import collect_decompositions, decomposition_sources
from shardplan.cost.model import NeuralCostModel
from shardplan.cost.profiles import get_profile
from shardplan.cost.specs import ShardSpec, specs_to_json
from shardplan.cost.split import is_holdout
from shardplan.cost.train import DECOMP_SPLIT, predicted_ratios, train_and_report
from shardplan.errors import InputError
from test_collect_and_models import _synthetic


def _shard(name: str, rows: int = 400, cols: int = 8, batch: int = 64) -> ShardSpec:
    return ShardSpec(name, rows, 0, rows, cols, 2.0, 0.5, batch)


def _ranks(rows: list[tuple[list[ShardSpec] | None, int]]) -> pd.DataFrame:
    """A plan-rank file: (shards or None for an infeasible plan, sample) per row."""
    return pd.DataFrame([{
        "seed": 7, "sample": sample, "source": "plan-rank" if specs else "plan-rank-infeasible",
        "task": f"task{sample}", "searcher": "torchrec", "rank": 0, "num_shards": len(specs) if specs else np.nan,
        "shards": specs_to_json(specs) if specs else None, "id_seed": sample, "optimizer": "sgd", "dtype": "fp32",
    } for specs, sample in rows])


def _trained_on_samples(n: int) -> list[int]:
    return [i for i in range(200) if not is_holdout(7, i)][:n]


def test_sources_are_trained_on_one_batch_ranks_of_three_shards_or_more():
    train = _trained_on_samples(4)
    held = next(i for i in range(200) if is_holdout(7, i))
    three = [_shard("a"), _shard("b"), _shard("c")]
    ranks = _ranks([(three, train[0]), (None, train[1]), (three[:2], train[1]), (three, held),
                    ([*three[:2], _shard("d", batch=32)], train[2]), (three * 2, train[3])])
    src = decomposition_sources(ranks)
    assert sorted(src.index) == [0, 5]  # not infeasible, not two shards, not held out, not two batch sizes
    assert list(src.index) == list(decomposition_sources(ranks).index)  # a seeded order


def test_decompositions_keep_every_repetition_and_resume(tmp_path):
    prof = get_profile("cpu-2c")
    samples = _trained_on_samples(3)
    ranks = _ranks([([_shard(f"t{s}{k}", cols=8 * (k + 1)) for k in range(3)], s) for s in samples])
    src, out = tmp_path / "ranks.parquet", tmp_path / "decomp.parquet"
    ranks.to_parquet(src)
    df = collect_decompositions(prof, out, 2, reps=2, src=src)
    assert len(df) == 2 and df.src_row.is_unique
    row = df.iloc[0]
    fwd = np.stack(row.fwd_samples_ms)  # repetitions x (whole, each shard alone)
    assert fwd.shape == (2, 4) and (fwd > 0).all()
    assert row.ratio_fwd == pytest.approx(np.median(fwd[:, 0] / fwd[:, 1:].sum(axis=1)))
    assert list(row.alone_bwd_ms) == pytest.approx(np.median(np.stack(row.bwd_samples_ms)[:, 1:], axis=0))
    assert len(row.ref_ms) == 2 and row.source == "decomposition"
    df = collect_decompositions(prof, out, 3, reps=2, src=src)
    assert len(df) == 3 and sorted(df.src_row) == [0, 1, 2]


def test_a_second_collection_skips_the_sets_of_an_earlier_file(tmp_path):
    prof = get_profile("cpu-2c")
    samples = _trained_on_samples(3)
    ranks = _ranks([([_shard(f"t{s}{k}") for k in range(3)], s) for s in samples])
    src, first, second = tmp_path / "ranks.parquet", tmp_path / "first.parquet", tmp_path / "second.parquet"
    ranks.to_parquet(src)
    taken = set(collect_decompositions(prof, first, 2, reps=1, src=src).src_row)
    df = collect_decompositions(prof, second, 2, reps=1, src=src, skip=[first])
    assert len(df) == 1 and not taken & set(df.src_row)  # only one source was left
    other = first.with_name("other.parquet")
    pd.read_parquet(first).assign(src="other.parquet").to_parquet(other)  # another source file's rows
    assert set(collect_decompositions(prof, tmp_path / "third.parquet", 3, reps=1, src=src,
                                      skip=[other]).src_row) == {0, 1, 2}
    with pytest.raises(InputError, match="--skip"):
        collect_decompositions(prof, tmp_path / "fourth.parquet", 1, reps=1, src=src, skip=[src])
    with pytest.raises(InputError, match="no decomposition file"):
        collect_decompositions(prof, tmp_path / "fifth.parquet", 1, reps=1, src=src, skip=[tmp_path / "none"])


def test_decomposition_ratios_teach_how_far_a_set_sits_over_its_shards_alone():
    """Absolute labels of sets of one and two shards that add up, and decompositions saying that sets of
    three to five shards run 1.5x their shards alone: with them the model must price such sets well over
    their shards; without, it has no reason to."""
    sets, fwd, bwd = _synthetic(600)
    small = [i for i, s in enumerate(sets) if len(s) <= 2]
    large = [i for i, s in enumerate(sets) if len(s) >= 3]
    abs_sets = [sets[i] for i in small]
    dsets = [sets[i] for i in large[:150]]
    kw = dict(profile="cpu-2c", epochs=80, hidden=32, code=16)
    with_ = NeuralCostModel(decomp_weight=3.0, **kw).fit(abs_sets, fwd[small], bwd[small], progress=False,
                                                         decompositions=(dsets, np.full((len(dsets), 2), 1.5)))
    without = NeuralCostModel(**kw).fit(abs_sets, fwd[small], bwd[small], progress=False)
    test = [s for s in _synthetic(200, seed=1)[0] if len(s) >= 3]
    got = {name: float(np.median(predicted_ratios(m, test)[:, 2])) for name, m in
           (("with", with_), ("without", without))}
    # 2026-11-24: with 1.31, without 0.93
    assert got["with"] > 1.2 and got["without"] < 1.1 and got["with"] - got["without"] > 0.25, got
    with pytest.raises(InputError, match="decompositions"):
        NeuralCostModel(**kw).fit(abs_sets, fwd[small], bwd[small], decompositions=(dsets, np.ones((2, 2))))


def test_training_with_decompositions_holds_some_out_and_names_the_flag(tmp_path):
    prof = get_profile("cpu-2c")
    sets, fwd, bwd = _synthetic(60)
    pd.DataFrame({"seed": 3, "sample": range(60), "source": "random", "num_shards": [len(s) for s in sets],
                  "shards": [specs_to_json(s) for s in sets], "fwd_ms": fwd, "bwd_ms": bwd,
                  "ref_before_ms": 1.0, "ref_after_ms": 1.0, "cpu_model": "x", "cpu_cores": 2, "torch": "t",
                  "fbgemm_gpu": "f", "threads": 1, "optimizer": "sgd"}).to_parquet(tmp_path / "compute.parquet")
    with pytest.raises(InputError, match="decompositions"):
        train_and_report(prof, epochs=2, data_dir=tmp_path, progress=False, decompositions=True)
    big = [i for i, s in enumerate(sets) if len(s) >= 3]
    pd.DataFrame({"src_row": range(len(big)), "shards": [specs_to_json(sets[i]) for i in big],
                  "ratio_fwd": 1.2, "ratio_bwd": 1.3, "whole_fwd_ms": fwd[big], "whole_bwd_ms": bwd[big],
                  "alone_fwd_ms": [[fwd[i] / len(sets[i])] * len(sets[i]) for i in big],
                  "alone_bwd_ms": [[bwd[i] / len(sets[i])] * len(sets[i]) for i in big],
                  "fwd_samples_ms": [[[1.2 * fwd[i]] + [fwd[i] / len(sets[i])] * len(sets[i])] for i in big],
                  "bwd_samples_ms": [[[1.3 * bwd[i]] + [bwd[i] / len(sets[i])] * len(sets[i])] for i in big]},
                 ).to_parquet(tmp_path / "compute-decompositions.parquet")
    meta = train_and_report(prof, epochs=2, data_dir=tmp_path, progress=False, decompositions=True)
    assert meta["command"].endswith("--decompositions") and "compute-decompositions" in meta["trained_on"]
    held = sum(is_holdout(-1, i) for i in range(len(big)))
    assert held and meta["evaluation"][DECOMP_SPLIT]["n"] == held
    assert set(meta["evaluation"][DECOMP_SPLIT]["models"]["neural"]["fwd+bwd"]) == {"mape", "spearman", "median_error"}
    # a profile whose recipe learns them does so by default, and its bare command reproduces that
    recipe = dataclasses.replace(prof, train_decompositions=True)
    meta = train_and_report(recipe, epochs=2, data_dir=tmp_path, progress=False)
    assert DECOMP_SPLIT in meta["evaluation"] and "decompositions" not in meta["command"]
    meta = train_and_report(recipe, epochs=2, data_dir=tmp_path, progress=False, decompositions=False)
    assert DECOMP_SPLIT not in meta["evaluation"] and meta["command"].endswith("--no-decompositions")
    assert recipe.to_json()["train_decompositions"] is True and "train_decompositions" not in prof.to_json()


def _decomp_frame(rows: list[tuple[int, float, float, str]]) -> pd.DataFrame:
    """A decompositions file's columns that bench/decomposition_error.py pairs: (src_row, whole ms, each of
    two shards alone ms, date) per row, fwd and bwd alike."""
    return pd.DataFrame([{"src_row": i, "whole_fwd_ms": w, "whole_bwd_ms": w, "alone_fwd_ms": [a, a],
                          "alone_bwd_ms": [a, a], "fwd_samples_ms": [[w, a, a]], "bwd_samples_ms": [[w, a, a]],
                          "ratio_fwd": w / (2 * a), "ratio_bwd": w / (2 * a), "ref_ms": [1.0, 1.2], "date": d}
                         for i, w, a, d in rows])


def test_paired_compares_the_same_sets_of_two_files(load_script):
    de = load_script("bench/decomposition_error.py")
    then = _decomp_frame([(0, 2.0, 1.0, "2026-11-24T19:41:00"), (1, 2.0, 1.0, "2026-11-24T19:42:00"),
                          (2, 2.0, 1.0, "2026-11-24T19:43:00")])
    now = _decomp_frame([(1, 3.0, 1.0, "2026-11-24T20:43:00"), (2, 2.2, 1.1, "2026-11-24T20:44:00"),
                         (5, 9.0, 1.0, "2026-11-24T20:45:00")])
    t = de.paired(now, then, pd.Series([True, False, True])).iloc[0]
    assert t["pairs"] == 2 and t["heavy (over 16 MB)"] == 1  # rows 1 and 2; row 1 heavy
    assert t["ratio, heavy"] == pytest.approx(1.5) and t["ratio, light"] == pytest.approx(1.0)
    assert t["sum alone"] == pytest.approx(1.05) and t["reference"] == pytest.approx(1.0)
    assert t["dates"] == "20:43-20:44 over 19:42-19:43 UTC"


def test_by_batch_times_a_ranks_two_ops_apart_and_training_skips_them(tmp_path):
    # a rank with data-parallel replicas runs an op per batch size; --by-batch times each alone beside the
    # whole, held-out ranks included (for reading), and the training loader leaves such rows out
    prof = get_profile("cpu-2c")
    held = next(i for i in range(200) if is_holdout(7, i))
    train = _trained_on_samples(1)[0]
    mixed = [_shard("a", batch=128), _shard("b", batch=128), _shard("dp", rows=20, batch=32)]
    ranks = _ranks([(mixed, held), ([_shard("c"), _shard("d"), _shard("e")], train)])
    src, out = tmp_path / "ranks.parquet", tmp_path / "parts.parquet"
    ranks.to_parquet(src)
    assert list(decomposition_sources(ranks, by_batch=True).index) == [0]  # two batch sizes, though held out
    df = collect_decompositions(prof, out, 5, reps=2, src=src, by_batch=True)
    assert len(df) == 1
    row = df.iloc[0]
    assert row.parts == "batches" and list(row.part_batches) == [32, 128] and row.source == "batch-parts"
    fwd = np.stack(row.fwd_samples_ms)
    assert fwd.shape == (2, 3) and (fwd > 0).all()  # the whole, then the local batch's op, then the global's
    from shardplan.cost.train import load_decompositions
    sets, ratios, kept = load_decompositions(out)
    assert sets == [] and len(kept) == 0
