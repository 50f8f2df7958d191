import dataclasses
import json
import math
import warnings

import numpy as np
import pandas as pd
import pytest
import torch

from shardplan.cost.baselines import GBMCostModel, RooflineCostModel
from shardplan.cost.collect import collect_compute
from shardplan.cost.draws import SetShape, random_sample
from shardplan.cost.kernel import RankOp, time_specs
from shardplan.cost.model import CONTEXT_TRIM_PERCENT, NeuralCostModel
from shardplan.cost.profiles import get_profile, host_cpu_signature
from shardplan.cost.specs import ShardSpec, specs_from_json
from shardplan.cost.split import is_holdout
from shardplan.cost.train import GROUP_SPLIT, metrics
from shardplan.domain import Table
from shardplan.errors import InputError

POOL = [Table(f"p{i}", 500 * (i + 1), 16, 2.0 + i, 0.3 * i) for i in range(6)]


def test_time_specs_real_kernel():
    specs = [ShardSpec("x", 5000, 0, 5000, 32, 8.0, 1.0, 256), ShardSpec("y", 800, 400, 400, 8, 3.0, 0.0, 256)]
    t = time_specs(specs, "sgd", "fp32", "cpu", repeats=3)
    assert t.fwd_ms > 0 and t.bwd_ms > 0 and len(t.fwd_samples_ms) == 3
    assert t.fwd_ms == sorted(t.fwd_samples_ms)[1]  # the median of the repeats
    more = [ShardSpec("x", 5000, 0, 5000, 128, 64.0, 0.0, 2048)] * 4
    assert time_specs(more, "sgd", "fp32", "cpu", repeats=3).fwd_ms > t.fwd_ms  # 100x the lookup work
    # A data-parallel replica sees another batch: two TBE ops, their times add up.
    mixed = time_specs(specs + [ShardSpec("z", 300, 0, 300, 8, 2.0, 0.0, 64)], "sgd", "fp32", "cpu", repeats=3)
    assert len(mixed.fwd_samples_ms) == 3 and mixed.fwd_ms > 0


def test_fresh_id_batches_are_other_draws_of_the_same_law_cycled_by_iteration():
    spec = ShardSpec("x", 5000, 0, 5000, 16, 8.0, 1.2, 256)
    fused = RankOp([spec], "sgd", "fp32", "cpu", id_seed=5, id_batches=3).ops[0]
    ids = [b[0] for b in fused.batches]
    assert len(ids) == 3 and not torch.equal(ids[0], ids[1])
    assert len({int(torch.mode(i).values) for i in ids}) == 1  # the same hottest row in every draw
    seen, tbe = [], fused.tbe
    fused.tbe = lambda indices, offsets: (seen.append(indices.data_ptr()), tbe(indices, offsets))[1]
    fused.run(1, 4, id_batches=3)
    fused.run(0, 2)  # the committed protocol: batch 0 every call
    assert seen == [ids[k].data_ptr() for k in (0, 1, 2, 0, 1, 0, 0)]
    with pytest.raises(ValueError, match="id_batches"):
        fused.run(0, 1, id_batches=4)


def test_random_sample_respects_budgets():
    prof = get_profile("cpu-2c")
    for i in range(50):
        specs = random_sample(np.random.default_rng([1, i]), POOL, prof)
        assert 1 <= len(specs) <= 15
        assert len({s.batch_size for s in specs}) == 1
        assert all(s.cols % 4 == 0 and 0 < s.rows <= s.table_rows for s in specs)
        assert sum(s.rows * s.cols * 4 for s in specs) <= prof.max_sample_weight_bytes


def test_a_set_the_budgets_stop_short_of_min_shards_is_timed_as_drawn_and_said(tmp_path, capsys):
    prof = dataclasses.replace(get_profile("cpu-2c"), max_sample_weight_bytes=64 * 1024)
    df = collect_compute(prof, POOL, tmp_path / "c.parquet", 1, seed=3, repeats=1, warmup=0,
                         min_shards=30, max_shards=30)
    n = int(df["num_shards"].iloc[0])
    assert 1 <= n < 30
    assert f"sample 0: {n} shards, under --min-shards 30" in capsys.readouterr().out


def test_collector_writes_stamped_rows_and_resumes(tmp_path):
    prof = get_profile("cpu-2c")
    out = tmp_path / "compute.parquet"
    df = collect_compute(prof, POOL, out, 3, seed=5, repeats=2, warmup=1)
    assert len(df) == 3 and out.exists()
    for col in ("profile", "cpu_model", "cpu_cores", "torch", "fbgemm_gpu", "date", "load1_before",
                "threads", "fwd_ms", "bwd_ms", "fwd_samples_ms", "warmup", "repeats"):
        assert col in df.columns
    # the chip, not only its name: one CPU name covers hosts the labels do not hold on (cpu-2c-zen4)
    assert df["cpu_signature"].tolist() == [host_cpu_signature()] * len(df) and "l3_mib" in df.columns
    assert (df["fwd_ms"] > 0).all() and (df["bwd_ms"] > 0).all()
    assert all(len(specs_from_json(s)) == n for s, n in zip(df["shards"], df["num_shards"]))
    again = collect_compute(prof, POOL, out, 3, seed=5, repeats=2, warmup=1)
    assert len(again) == 3  # nothing redone
    stopped = collect_compute(prof, POOL, out, 8, seed=5, repeats=2, warmup=1, max_seconds=0)
    assert len(stopped) == 3  # past its deadline at once: nothing added, nothing lost
    more = collect_compute(prof, POOL, out, 5, seed=5, repeats=2, warmup=1)
    assert sorted(more["sample"]) == [0, 1, 2, 3, 4]
    assert pd.read_parquet(out)["shards"].iloc[0] == df["shards"].iloc[0]
    # another optimizer's or dtype's timings would blend into these under one model: refused, file untouched
    before = out.read_bytes()
    for kind in ({"optimizer": "rowwise_adagrad"}, {"dtype": "fp16"}):
        with pytest.raises(InputError, match=r"--optimizer/--dtype.*profile of its own"):
            collect_compute(prof, POOL, out, 6, seed=5, repeats=2, warmup=1, **kind)
    assert out.read_bytes() == before
    # what FBGEMM's CPU TBE cannot train with is refused at the door, naming the flag, with nothing written
    for kind, flag in (({"optimizer": "adam"}, "--optimizer"), ({"dtype": "bf16"}, "--dtype"),
                       ({"dtype": "int8"}, "--dtype")):
        with pytest.raises(InputError, match=rf"^{flag}: .* does not train on FBGEMM's CPU kernels"):
            collect_compute(prof, POOL, tmp_path / "other.parquet", 1, **kind)
    assert not (tmp_path / "other.parquet").exists()


def _synthetic(n: int, seed: int = 0):
    """Shard sets with a known cost law, to check that the models can learn and round-trip."""
    rng = np.random.default_rng(seed)
    sets, fwd, bwd = [], [], []
    for _ in range(n):
        k = int(rng.integers(1, 6))
        specs = [ShardSpec(f"t{rng.integers(100)}", int(rng.integers(100, 10_000)), 0, 0, int(rng.choice([8, 16, 64])),
                           float(rng.uniform(1, 20)), 0.0, 1024) for _ in range(k)]
        specs = [ShardSpec(s.table, s.table_rows, 0, s.table_rows, s.cols, s.pooling_factor, 0.0, 1024) for s in specs]
        work = sum(s.pooling_factor * s.cols for s in specs) / 100.0
        sets.append(specs)
        fwd.append(0.05 + work)
        bwd.append(0.1 + 2 * work)
    return sets, np.array(fwd), np.array(bwd)


def test_neural_model_learns_and_round_trips(tmp_path):
    sets, fwd, bwd = _synthetic(400)
    model = NeuralCostModel(profile="cpu-2c", epochs=60, hidden=32, code=16).fit(sets, fwd, bwd, progress=False)
    test_sets, tf, tb = _synthetic(100, seed=1)
    pf, pb = model.predict(test_sets)
    m = metrics(pf, pb, tf, tb)
    assert m["fwd+bwd"]["mape"] < 0.25 and m["fwd+bwd"]["spearman"] > 0.9
    model.save(tmp_path / "m.json", {"note": "test"})
    loaded = NeuralCostModel.load(tmp_path / "m.json", profile="cpu-2c")
    assert np.allclose(loaded.predict(test_sets)[0], pf, rtol=1e-5)
    assert loaded.metadata["note"] == "test"
    assert model.predict([[]])[0][0] == 0.0
    with pytest.raises(InputError, match="trained for profile 'cpu-2c', not 'h100'"):
        NeuralCostModel.load(tmp_path / "m.json", profile="h100")


def test_a_model_started_from_another_kinds_learns_the_difference_from_few_sets():
    """``fit(init=...)``: a kind whose backward costs twice the base's, learnt from 40 sets, starting from a model
    of the base fitted on 400, prices unseen sets far better than the same recipe started from a seeded draw."""
    kw = dict(profile="cpu-2c", hidden=32, code=16)
    base = NeuralCostModel(epochs=60, **kw).fit(*_synthetic(400), progress=False)
    sets, fwd, bwd = _synthetic(40, seed=2)
    test_sets, tf, tb = _synthetic(100, seed=1)
    err = {}
    for name, init in (("warm", base), ("cold", None)):
        model = NeuralCostModel(epochs=10, **kw).fit(sets, fwd, 2 * bwd, progress=False, init=init)
        err[name] = metrics(*model.predict(test_sets), tf, 2 * tb)["fwd+bwd"]["mape"]
    assert err["warm"] < 0.5 * err["cold"], err
    assert np.array_equal(base.mean, NeuralCostModel(epochs=1, **kw).fit(sets, fwd, bwd, progress=False,
                                                                          init=base).mean)  # the base's scaling
    with pytest.raises(InputError, match="hidden=32, this model 16"):
        NeuralCostModel(profile="cpu-2c", epochs=1, hidden=16, code=16).fit(sets, fwd, bwd, init=base)


def test_a_host_without_plan_ranks_keeps_its_start_models_random_level():
    """A new host's random sets alone cannot say where plan ranks lie; a start model that learnt the offset on its
    own host lends it, held fixed, so the new host's model predicts plan ranks below its random sets as that one
    did. Without such a start, asking for the level is an error that says what is missing."""
    kw = dict(profile="cpu-2c", hidden=32, code=16, random_level=True)
    ranks, rf, rb = _synthetic(200, seed=3)
    sets, fwd, bwd = _synthetic(200)
    marked = np.arange(400) < 200  # the random sets come first; the plan ranks run 10% under them
    base = NeuralCostModel(epochs=30, **kw).fit(sets + ranks, np.r_[fwd, rf / 1.1], np.r_[bwd, rb / 1.1],
                                                 progress=False, random_sets=marked)
    assert np.all(base.random_offset > 0.03)
    new_sets, nf, nb = _synthetic(60, seed=4)
    model = NeuralCostModel(epochs=5, **kw).fit(new_sets, 2 * nf, 2 * nb, progress=False,
                                                random_sets=np.ones(60, bool), init=base)
    assert np.array_equal(model.random_offset, base.random_offset)  # held, not learnt again
    at_random, at_plan = model.predict(new_sets, random_level=True)[1], model.predict(new_sets)[1]
    assert np.allclose(at_random / at_plan, np.exp(base.random_offset[1]), rtol=1e-4)
    with pytest.raises(InputError, match="or an init model that learnt it"):
        NeuralCostModel(epochs=1, **kw).fit(new_sets, nf, nb, progress=False, random_sets=np.ones(60, bool))


def test_corrupt_model_file(tmp_path):
    bad = tmp_path / "m.json"
    bad.write_text('{"format": "shardplan/compute-model@1", "profile": "cpu-2c"')
    with pytest.raises(InputError, match="not a usable compute-cost model"):
        NeuralCostModel.load(bad)
    with pytest.raises(InputError, match="hidden"):
        NeuralCostModel(profile="cpu-2c", hidden=0)


def test_baselines_fit_predict():
    sets, fwd, bwd = _synthetic(300)
    for model in (RooflineCostModel(), GBMCostModel()):
        pf, pb = model.fit(sets, fwd, bwd).predict(sets)
        assert pf.shape == fwd.shape and (pf > 0).all() and (pb > 0).all()
        assert metrics(pf, pb, fwd, bwd)["fwd+bwd"]["spearman"] > 0.8


@pytest.mark.parametrize("context_totals,context_code,components", [
    (False, "free", 1), (True, "free", 1), (True, "none", 1), (True, "banded", 1), (False, "free", 3),
    (True, "banded", 2)])
def test_incremental_sums_match_whole_set_prediction(context_totals, context_code, components, tmp_path):
    sets, fwd, bwd = _synthetic(200)
    model = NeuralCostModel(profile="cpu-2c", epochs=5, hidden=16, code=8, context_totals=context_totals,
                            context_code=context_code, components=components).fit(sets, fwd, bwd, progress=False)
    specs = sets[0] + sets[1]
    codes, times = model.encode_shards(specs)
    assert codes.shape == (len(specs), model.code_width) and model.code_width == 8 + 3 * context_totals
    assert times.shape == (len(specs), 2 * components) == (len(specs), model.time_width)
    ms = model.combine(codes.sum(0, keepdims=True), times.sum(0, keepdims=True), np.array([len(specs)]))
    f, b = model.predict([specs])
    assert ms[0] == pytest.approx([f[0], b[0]], rel=1e-4)
    assert model.on_bound([specs, []]).shape == (2, 2)
    none = np.zeros((1, model.time_width))
    assert model.combine(np.zeros((1, model.code_width)), none, np.array([0])).tolist() == [[0.0, 0.0]]
    # a rank a searcher emptied by subtraction keeps float32 remainders; they price as nothing, silently
    emptied = np.zeros((1, model.code_width))
    emptied[0, model.code:] = -32.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert model.combine(emptied, none, np.array([0])).tolist() == [[0.0, 0.0]]
    model.save(tmp_path / "m.json")
    loaded = NeuralCostModel.load(tmp_path / "m.json")
    assert (loaded.context_totals, loaded.context_code, loaded.components) == (context_totals, context_code,
                                                                               components)
    assert np.allclose(loaded.predict([specs])[0], f, rtol=1e-5)
    with pytest.raises(InputError, match="context_code"):  # a context left the shard count alone
        NeuralCostModel(profile="cpu-2c", context_code="none")
    with pytest.raises(InputError, match="context_code"):
        NeuralCostModel(profile="cpu-2c", context_totals=True, context_code="loose")
    for bad in (0, 9, 2.0):
        with pytest.raises(InputError, match="components"):
            NeuralCostModel(profile="cpu-2c", components=bad)


def test_context_is_held_within_the_range_it_took_on_the_training_sets(tmp_path):
    sets, fwd, bwd = _synthetic(300)
    model = NeuralCostModel(profile="cpu-2c", epochs=20, hidden=16, code=8).fit(sets, fwd, bwd, progress=False)
    lo, hi = model.context_range
    net = model.net

    def raw_context(specs):
        x, mask, _ = model.network_inputs([specs])
        with torch.no_grad():
            code_sum, time_sum, count = net.pooled(torch.from_numpy(x), torch.from_numpy(mask))
            return net.raw_context(code_sum, count)[0].numpy(), time_sum[0].numpy()

    train_ctx = np.array([raw_context(s)[0] for s in sets])
    # the range the training sets took, less the trimmed share at each end: the outliers lie beyond it
    trim = CONTEXT_TRIM_PERCENT
    assert np.allclose(np.percentile(train_ctx, trim, axis=0), lo, atol=1e-5)
    assert np.allclose(np.percentile(train_ctx, 100 - trim, axis=0), hi, atol=1e-5)
    assert (train_ctx.min(0) < lo).all() and (train_ctx.max(0) > hi).all()
    # a set of 64 shards, where training saw at most 5: its unbounded context leaves the range
    big = [s for specs in sets[:40] for s in specs][:64]
    ctx, time_sum = raw_context(big)
    assert ((ctx < lo) | (ctx > hi)).any()
    held = np.clip(ctx, lo, hi)
    expected = np.exp(np.logaddexp(np.log(time_sum + 1e-9) + held[:2], held[2:]))
    f, b = model.predict([big])
    assert [f[0], b[0]] == pytest.approx(expected, rel=1e-4)
    unbounded = np.exp(np.logaddexp(np.log(time_sum + 1e-9) + ctx[:2], ctx[2:]))
    assert [x[0] for x in model.predict([big], bounded=False)] == pytest.approx(unbounded, rel=1e-4)
    assert model.predict([big])[0][0] == f[0]  # the diagnostic leaves the bound in place
    # which sets the bound prices: a factor (fwd, bwd) outside the range, not the overhead
    inside = int(np.flatnonzero(((train_ctx >= lo) & (train_ctx <= hi)).all(axis=1))[0])
    assert model.on_bound([big, sets[inside], []]).tolist() == [list((ctx[:2] < lo[:2]) | (ctx[:2] > hi[:2])),
                                                                [False, False], [False, False]]
    codes, times = model.encode_shards(big)  # the searchers' incremental path holds it alike
    assert model.combine(codes.sum(0, keepdims=True), times.sum(0, keepdims=True), np.array([64]))[0] \
        == pytest.approx(expected, rel=1e-4)
    model.save(tmp_path / "m.json")
    assert np.allclose(NeuralCostModel.load(tmp_path / "m.json").predict([big])[0], f, rtol=1e-5)
    # a file written before the bound existed has none, and predicts as it was trained: unbounded
    state = json.loads((tmp_path / "m.json").read_text())
    del state["context_range"]
    (tmp_path / "old.json").write_text(json.dumps(state))
    old = NeuralCostModel.load(tmp_path / "old.json")
    assert old.context_range is None
    assert old.predict([big])[0][0] == pytest.approx(unbounded[0], rel=1e-4)


def test_train_round_trip_on_a_tiny_collected_sample(tmp_path):
    from shardplan.cost.train import train_and_report

    prof = get_profile("cpu-2c")
    df = collect_compute(prof, POOL, tmp_path / "compute.parquet", 30, seed=3, repeats=2, warmup=1)
    assert {"ref_before_ms", "ref_after_ms"} <= set(df.columns) and (df.ref_before_ms > 0).all()
    meta = train_and_report(prof, epochs=3, data_dir=tmp_path, progress=False)
    assert meta["train_samples"] + meta["holdout_samples"] == 30
    assert set(meta["evaluation"]["holdout"]["models"]) == {"neural", "roofline (TorchRec form)", "gbm (hand features)"}
    model = NeuralCostModel.load(tmp_path / "compute-model.json", profile="cpu-2c")
    assert model.metadata["reference_ms"] == pytest.approx(meta["reference_ms"])
    assert (tmp_path / "reference.json").exists() and (tmp_path / "compute-model-report.md").exists()
    f, b = model.predict([specs_from_json(df.shards.iloc[0])])
    assert f[0] > 0 and b[0] > 0
    assert (meta["optimizers"], meta["dtypes"]) == (["sgd"], ["fp32"])  # what the estimator lets it price
    (tmp_path / "mixed").mkdir()  # two dtypes in one file would train one blend: refused, naming both
    df.assign(dtype=["fp32", "fp16"] * 15).to_parquet(tmp_path / "mixed" / "compute.parquet")
    with pytest.raises(InputError, match=r"2 optimizer/dtype pairs.*'fp16'.*'fp32'"):
        train_and_report(prof, epochs=1, data_dir=tmp_path / "mixed", progress=False)
    # too few sets to train on is refused at the door, naming the file and the fix
    (tmp_path / "few").mkdir()
    df.head(3).to_parquet(tmp_path / "few" / "compute.parquet")
    with pytest.raises(InputError, match="collect more"):
        train_and_report(prof, epochs=1, data_dir=tmp_path / "few", progress=False)
    # a GPU profile's labels lose the host's launch jitter, not a slowdown; too few sets to read it on
    # leave them as timed, and the raw-label split scores the same sets alike
    gpu = train_and_report(get_profile("h100"), epochs=3, data_dir=tmp_path, out_dir=tmp_path / "h100",
                           progress=False, context_totals=True)
    assert "launch jitter" in gpu["labels"] and gpu["host_state"]["fwd_ms_per_reference_ms"] == [0.0] * 4
    assert list(gpu["evaluation"]) == ["holdout", "holdout, raw labels (machine drift left in)"]
    assert gpu["evaluation"]["holdout"] == gpu["evaluation"]["holdout, raw labels (machine drift left in)"]
    # the recorded command is the one that reproduces the file: the candidate's flag included
    assert gpu["command"].endswith("--context-totals") and "--context-totals" not in meta["command"]
    assert NeuralCostModel.load(tmp_path / "h100" / "compute-model.json", profile="h100")

    # the same sets as plan groups (levels off by one factor per group): learnt, held out by group
    groups = df[["shards", "fwd_ms", "bwd_ms"]].assign(group=[f"g{i // 5}" for i in range(len(df))],
                                                       seed=7, sample=[i // 5 for i in range(len(df))])
    groups[["fwd_ms", "bwd_ms"]] *= 2.0
    groups.to_parquet(tmp_path / "compute-plan-groups.parquet")
    meta = train_and_report(prof, epochs=3, data_dir=tmp_path, progress=False)
    held = {i // 5 for i in range(len(df)) if is_holdout(7, i // 5)}
    assert meta["train_group_tasks"] + meta["holdout_group_tasks"] == 6 == meta["train_group_tasks"] + len(held)
    assert (GROUP_SPLIT in meta["evaluation"]) == bool(held)
    assert "compute-plan-groups.parquet" in meta["trained_on"]


def test_slowdown_divides_out_drift():
    from shardplan.cost.kernel import slowdown, time_reference

    assert slowdown(2.0, 4.0, 1.5) == pytest.approx(2.0)
    assert time_reference() > 0


def test_disturbed_timings_are_retried(monkeypatch):
    """A timing whose reference shows the machine slowed is taken again; the quietest attempt is kept."""
    from shardplan.cost import kernel

    refs = iter([3.0, 3.1, 2.0, 2.2, 1.0, 1.05])  # (before, after) of three attempts: the third is quiet
    monkeypatch.setattr(kernel, "time_reference", lambda device="cpu": next(refs))
    monkeypatch.setattr(kernel.time, "sleep", lambda s: None)
    specs = [ShardSpec("x", 500, 0, 500, 8, 2.0, 0.5, 64)]
    b = kernel.time_specs_bracketed(specs, "sgd", "fp32", "cpu", 0, 1, 2, quiet_ms=1.0, max_attempts=4)
    assert (b.ref_before_ms, b.ref_after_ms, b.attempts) == (1.0, 1.05, 3)
    refs = iter([3.0, 3.1, 2.0, 2.2])  # never quiet within two attempts: the less disturbed one is kept
    b = kernel.time_specs_bracketed(specs, "sgd", "fp32", "cpu", 0, 1, 2, quiet_ms=1.0, max_attempts=2)
    assert (b.ref_before_ms, b.ref_after_ms, b.attempts) == (2.0, 2.2, 2)


def test_a_profiles_retry_pause_is_the_collectors_wait(monkeypatch):
    """A profile may set the pause before a retry (``retry_pause_s``, times the attempt number): the nested
    guest's reference jitters from one timing to the next, and a one-second pause per retry made its
    collection about 10x slower. Unset, the kernel's RETRY_PAUSE_S holds (the committed CPU profiles)."""
    from dataclasses import replace

    from shardplan.cost import kernel
    from shardplan.cost.collect import timed_row

    slept: list[float] = []
    monkeypatch.setattr(kernel.time, "sleep", slept.append)
    monkeypatch.setattr(kernel, "RETRY_PAUSE_S", 0.7)
    specs = [ShardSpec("x", 500, 0, 500, 8, 2.0, 0.5, 64)]
    for pause, waits in ((None, [0.7, 1.4]), (0.1, [0.1, 0.2])):
        refs = iter([3.0, 3.1, 2.0, 2.2, 1.0, 1.05])  # the third attempt is quiet: two waits
        monkeypatch.setattr(kernel, "time_reference", lambda device="cpu": next(refs))
        profile = replace(get_profile("cpu-2c"), retry_pause_s=pause)
        row = timed_row(specs, "sgd", "fp32", profile, 0, 1, 2, quiet_ms=1.0)
        assert row["attempts"] == 3 and slept == pytest.approx(waits)
        slept.clear()
    assert get_profile("cpu-2c").retry_pause_s is None and "retry_pause_s" not in get_profile("cpu-2c").to_json()


def test_a_set_the_gate_failed_is_timed_again_after_the_host_reads_quiet(monkeypatch, tmp_path):
    """``collect compute --wait-quiet``: a set still disturbed after its last attempt waits for three quiet
    reference readings in a row and is timed again; the less disturbed timing is kept and the wait recorded.
    A set that passed is not timed again; a wait that never sees quiet ends at its limit."""
    from shardplan.cost import collect, kernel

    slept: list[float] = []  # the retries' pauses too (one time module): 0 s in the tests
    monkeypatch.setattr(collect.time, "sleep", slept.append)
    profile = get_profile("cpu-2c")
    monkeypatch.setattr(collect, "quiet_reference_ms", lambda p: 1.0)
    disturbed = [2.0, 2.1] * 4  # all four attempts of sample 0 disturbed
    waiting = [1.5, 1.0, 1.1, 1.3, 1.0, 1.0, 1.05]  # quiet three in a row only at the end
    again = [1.0, 1.02]  # sample 0 again, quiet; then sample 1, quiet at once
    refs = iter(disturbed + waiting + again + [1.0, 1.01])
    monkeypatch.setattr(kernel, "time_reference", lambda device="cpu": next(refs))
    monkeypatch.setattr(collect, "time_reference", lambda device="cpu": next(refs))
    df = collect.collect_compute(profile, POOL, tmp_path / "c.parquet", 2, repeats=1, warmup=0, wait_quiet_s=60)
    first, second = df.iloc[0], df.iloc[1]
    assert (first.ref_before_ms, first.ref_after_ms, first.attempts) == (1.0, 1.02, 1)
    assert first.waited_s >= 0 and slept.count(2.0) == len(waiting) - 1  # none after the third quiet reading
    assert (second.ref_before_ms, second.attempts) == (1.0, 1) and np.isnan(second.waited_s)
    monkeypatch.setattr(collect.time, "monotonic", iter(range(0, 1000, 10)).__next__)  # 10 s a reading
    readings: list[float] = []
    monkeypatch.setattr(collect, "time_reference", lambda device="cpu": readings.append(3.0) or 3.0)
    assert collect.wait_until_quiet("cpu", 1.0, 35) >= 35 and len(readings) == 3  # the clock read 10, 20, 30 s


def test_a_profiles_slowdown_window_takes_one_references_jitter_out_of_a_label():
    """With ``slowdown_window_s`` a timing is divided by the median slowdown of the timings within half the
    window of it: one jittery reference moves its own label no more, a drift minutes long still divides
    out, an undated row keeps its own slowdown, and each row's divisor is its own whatever the frame's order.
    Unset, each label is over its own references (every profile before the nested guest's)."""
    from shardplan.cost.labels import label_slowdowns

    t0 = pd.Timestamp("2026-11-27T08:00:00Z")
    slow = [1.0] * 10 + [1.5] * 10  # the host slows by half after 100 s, for good
    refs = [s * 2.0 for s in slow]
    refs[4] = 6.0  # one reference read three times its neighbours', the kernels did not
    df = pd.DataFrame({"ref_before_ms": refs, "ref_after_ms": refs,
                       "date": [(t0 + pd.Timedelta(seconds=10 * i)).isoformat() for i in range(20)]})
    df.loc[19, "date"] = None
    own = label_slowdowns(df, 2.0)
    assert own[4] == pytest.approx(3.0) and own.tolist() == label_slowdowns(df, 2.0, None).tolist()
    smoothed = label_slowdowns(df, 2.0, window_s=45.0)  # the two timings either side
    assert smoothed[4] == pytest.approx(1.0)  # the jitter is gone
    assert smoothed[0] == pytest.approx(1.0) and smoothed[15] == pytest.approx(1.5)  # the drift is kept
    assert smoothed[19] == own[19] == pytest.approx(1.5)  # no date: its own
    shuffled = df.sample(frac=1.0, random_state=0)
    assert label_slowdowns(shuffled, 2.0, 45.0) == pytest.approx(smoothed[shuffled.index.to_numpy()])
    committed = get_profile("cpu-2c")
    assert committed.slowdown_window_s is None and "slowdown_window_s" not in committed.to_json()


def test_retimed_rows_are_labelled_by_the_median_of_their_timings_at_the_labels_level():
    """A row timed twice more gets the median of its three labels, each re-timing first moved to the labels'
    level (a pass 10% slower throughout shifts nothing) and divided by its own references; rows never re-timed,
    re-timings of another file (other keys) and of a plan that did not exist leave the labels alone."""
    from shardplan.cost.labels import repeated_labels

    def frame(fwd, refs, **keys):
        n = len(fwd)
        return pd.DataFrame({"seed": [0] * n, "sample": range(n), "source": ["random"] * n, **keys,
                             "fwd_ms": fwd, "bwd_ms": [2 * f for f in fwd],
                             "ref_before_ms": refs, "ref_after_ms": refs})

    df = frame([1.0, 2.0, 3.0, 4.0], [1.0] * 4)
    fwd, bwd = df["fwd_ms"].to_numpy(), df["bwd_ms"].to_numpy()
    # pass 1: 10% slow on the host (references 1.1x), rows 0-2 only; row 1 read 30% high beyond that
    one = frame([1.1, 2.6 * 1.1, 3.3], [1.1] * 3)
    # pass 2: 10% slow where the reference missed it (the level moves it back); row 1 as labelled
    two = frame([1.1, 2.2, 3.3], [1.0] * 3)
    other = frame([9.0, 9.0], [1.0] * 2, source=["plan-rank"] * 2)  # a plan-rank file's: pairs with nothing
    infeasible = frame([float("nan")], [1.0])
    f, b, n = repeated_labels(df, fwd, bwd, [one, two, other, infeasible], nominal_ms=1.0)
    assert n.tolist() == [3, 3, 3, 1]
    assert f == pytest.approx([1.0, 2.0, 3.0, 4.0]) and b == pytest.approx(2 * f)
    noisy = fwd.copy()
    noisy[1] = 2.8  # the label itself read high: the median of 2.8, 2.6 and 2.0
    f, _, _ = repeated_labels(df, noisy, bwd, [one, two], nominal_ms=1.0)
    assert f[1] == pytest.approx(2.6)
    f, _, _ = repeated_labels(df, fwd, bwd, [], nominal_ms=1.0)
    assert f.tolist() == fwd.tolist()


def test_probe_gated_collection_accepts_a_steady_slowdown_but_retries_a_burst(monkeypatch):
    """Under MEASURE_SLOW_LIMIT (the collector behind the fitness probe) a steadily 1.6x slow timing is
    kept (it divides out) and one whose speed changed during it is retried; the collector's default
    quiet gate retries both."""
    from shardplan.cost import kernel
    from shardplan.cost.kernel import MEASURE_SLOW_LIMIT

    assert not kernel.disturbed(1.6, 1.7, 1.0, MEASURE_SLOW_LIMIT)
    assert kernel.disturbed(1.6, 1.7, 1.0)  # the collector's QUIET_TOLERANCE
    assert kernel.disturbed(1.0, 1.5, 1.0, MEASURE_SLOW_LIMIT)  # a burst, even if under the limit
    assert kernel.disturbed(2.5, 2.6, 1.0, MEASURE_SLOW_LIMIT)
    monkeypatch.setattr(kernel.time, "sleep", lambda s: None)
    specs = [ShardSpec("x", 500, 0, 500, 8, 2.0, 0.5, 64)]
    refs = iter([1.0, 1.5, 1.6, 1.7, 1.0, 1.0])  # a burst, then steady at 1.6x: the second is kept
    monkeypatch.setattr(kernel, "time_reference", lambda device="cpu": next(refs))
    b = kernel.time_specs_bracketed(specs, "sgd", "fp32", "cpu", 0, 1, 2, quiet_ms=1.0, max_attempts=3,
                                    slow_limit=MEASURE_SLOW_LIMIT)
    assert (b.ref_before_ms, b.ref_after_ms, b.attempts) == (1.6, 1.7, 2)


def test_plan_measurement_reports_every_round(monkeypatch, plan_dict):
    """Per rank the median of the interleaved rounds, with every round's fwd+bwd beside it, all
    divided by one slowdown: the median of every reference reading of the call."""
    from shardplan.execute import measure
    from shardplan.formats import load_plan

    plan = load_plan(plan_dict)
    quiet = measure.reference_ms(get_profile("cpu-2c"))
    rounds = iter([([(5.0, 9.0), (6.0, 7.0)], [1.0, 3.0]),  # round 0: raw (fwd, bwd) of ranks 0, 1; refs
                   ([(4.0, 8.0), (9.0, 9.0)], [2.0, 2.0]),  # round 1
                   ([(7.0, 6.0), (8.0, 8.0)], [2.0, 9.0])])  # round 2

    def fake_time_round(jobs, *args):
        per_rank, refs = next(rounds)
        assert [j.rank for j in jobs] == [0, 1]
        return per_rank, [r * quiet for r in refs]

    monkeypatch.setattr(measure, "_time_round", fake_time_round)
    m = measure.measure_plans([plan], rounds=3)[0]
    assert m.extra["slowdown"] == pytest.approx(2.0) and m.extra["slowdown_per_round"] == [2.0, 2.0, 5.5]
    assert [(r.fwd_compute_ms, r.bwd_compute_ms) for r in m.per_rank] == [(2.5, 4.0), (4.0, 4.0)]
    assert m.extra["rounds_compute_ms_per_rank"] == [[7.0, 6.0, 6.5], [6.5, 9.0, 8.0]]
    assert "median of 3" in m.extra["compute"] and "2.000x" in m.extra["compute"]


def test_visits_take_turns_over_ranks_built_once_per_round(monkeypatch, plan_dict):
    """With visits, each rank is built once a round and visited in turn with the other ranks, each
    visit between two reference readings; its figure is the median of every iteration of its visits
    over the call's one slowdown; a plan too big to hold is refused up front."""
    from shardplan.cost import kernel
    from shardplan.cost.kernel import KernelTiming
    from shardplan.errors import InputError
    from shardplan.execute import measure
    from shardplan.formats import load_plan

    plan = load_plan(plan_dict)
    quiet = measure.reference_ms(get_profile("cpu-2c"))
    built, calls = [], []

    class FakeOp:
        def __init__(self, specs, *a):
            self.rank = len(built) % 2
            built.append(self.rank)

        def run(self, warmup, repeats):
            calls.append((self.rank, warmup, repeats))
            ms = [10.0 * (self.rank + 1) + i for i in range(repeats)]
            return KernelTiming(0.0, 0.0, tuple(ms), tuple(ms))

    # Readings in order: a spike on one visit moves only the call's median, not that visit.
    refs = iter([1.0, 1.0, 1.0, 4.0] + [2.0] * 100)
    monkeypatch.setattr(measure, "RankOp", FakeOp)
    monkeypatch.setattr(kernel, "time_reference", lambda device="cpu": next(refs) * quiet)
    m = measure.measure_plans([plan], rounds=2, visits=3)[0]
    assert built == [0, 1, 0, 1]  # once per rank and round
    k = math.ceil(get_profile("cpu-2c").repeats / 3)
    assert calls[:6] == [(0, 3, k), (1, 3, k), (0, 1, k), (1, 1, k), (0, 1, k), (1, 1, k)]
    assert m.extra["slowdown"] == pytest.approx(2.0)  # 24 readings, 20 of them 2.0
    assert m.per_rank[0].fwd_compute_ms == pytest.approx(float(np.median([10.0 + i for i in range(k)])) / 2)
    assert m.per_rank[1].fwd_compute_ms == pytest.approx(float(np.median([20.0 + i for i in range(k)])) / 2)
    assert "3 visits" in m.extra["compute"]

    calls.clear()  # a longer warm-up opens every visit but the first
    measure.measure_plans([plan], rounds=1, visits=3, visit_warmup=2)
    assert calls == [(0, 3, k), (1, 3, k), (0, 2, k), (1, 2, k), (0, 2, k), (1, 2, k)]
    with pytest.raises(InputError, match="visit_warmup"):
        measure.measure_plans([plan], visits=3, visit_warmup=-1)

    monkeypatch.setattr(measure, "available_memory_gb", lambda: 1e-6)
    with pytest.raises(InputError, match="visits"):
        measure.measure_plans([plan], visits=2)


def test_plans_of_a_call_take_turns_visit_by_visit_when_they_fit_together(monkeypatch, plan_dict):
    """Two plans that fit in memory together are visited rank by rank across plans (plan 0's ranks,
    plan 1's, again); when only one fits at a time, plan after plan."""
    from shardplan.cost.kernel import KernelTiming
    from shardplan.execute import measure
    from shardplan.formats import load_plan

    plan = load_plan(plan_dict)
    built, calls = [], []

    class FakeOp:
        def __init__(self, *a, **k):
            self.id = len(built)
            built.append(self.id)

        def run(self, warmup, repeats):
            calls.append(self.id)
            return KernelTiming(1.0, 1.0, (1.0,) * repeats, (1.0,) * repeats)

    monkeypatch.setattr(measure, "RankOp", FakeOp)
    need = sum(measure.rank_memory_gb(plan))
    for have, order, says in ((3 * need, [0, 1, 2, 3, 0, 1, 2, 3], "every plan of the call"),
                              (1.5 * need, [0, 1, 0, 1, 2, 3, 2, 3], "the plan's other ranks")):
        built.clear(), calls.clear()
        monkeypatch.setattr(measure, "available_memory_gb", lambda: have)
        m = measure.measure_plans([plan, plan], visits=2)
        assert calls == order and says in m[0].extra["compute"]


def test_fitness_probe_compares_retimed_ranks_with_their_labels(monkeypatch):
    """Fit when stored ranks re-time (divided) near their labels and the reference is near quiet;
    a wait that runs out is a MachineUnfitError, a zero wait returns the unfit probe."""
    from shardplan.cost import kernel
    from shardplan.cost.kernel import KernelTiming
    from shardplan.errors import MachineUnfitError
    from shardplan.cost import fitness

    prof = get_profile("cpu-2c")
    ranks = fitness.probe_ranks(prof)
    assert len(ranks) == fitness.PROBE_RANKS and all(4.0 <= r.label_ms <= 12.0 for r in ranks)
    assert fitness.probe_ranks(prof) == ranks  # a fixed choice
    long_ranks = fitness.tilt_ranks(prof)
    assert len(long_ranks) == fitness.TILT_RANKS and all(20.0 <= r.label_ms <= 45.0 for r in long_ranks)
    label = {r.specs: r.label_ms for r in ranks + long_ranks}
    state = {"speed": 1.0, "ref": 1.0, "long": 1.0}
    quiet = fitness.reference_ms(prof)

    def fake_time(specs, *a, **k):
        # the raw time: label x own drift x machine, and the long ranks' own factor
        ms = label[tuple(specs)] * state["speed"] * state["ref"] * (state["long"] if tuple(specs) in
                                                                    {r.specs for r in long_ranks} else 1.0)
        return KernelTiming(ms / 2, ms / 2, (), ())

    monkeypatch.setattr(kernel, "time_specs", fake_time)
    monkeypatch.setattr(kernel, "time_reference", lambda device="cpu": quiet * state["ref"])
    monkeypatch.setattr(fitness.time, "sleep", lambda s: None)
    f = fitness.probe(prof)
    assert f.label_ratio == pytest.approx(1.0) and f.tilt == pytest.approx(1.0) and f.fit
    state["long"] = 0.7  # short ranks slowed more than long ones (a busy neighbour): unfit
    f = fitness.probe(prof)
    assert f.label_ratio == pytest.approx(1.0) and f.tilt == pytest.approx(0.7) and not f.fit
    assert fitness.Fitness.from_columns(pd.Series(f.columns())) == f
    state["long"] = 1.0
    state["ref"] = 1.6  # a steady slowdown that divides out: fit
    assert fitness.probe(prof).label_ratio == pytest.approx(1.0) and fitness.probe(prof).fit
    state["ref"] = 2.5  # past what plan measurements accept
    assert not fitness.probe(prof).fit
    state.update(ref=1.05, speed=1.3)  # the reference reads quiet but ranks run 1.3x: unfit
    f = fitness.wait_until_fit(prof, 0)
    assert f.label_ratio == pytest.approx(1.3) and not f.fit
    with pytest.raises(MachineUnfitError, match="run the same command again later"):
        fitness.wait_until_fit(prof, max_wait_s=90, poll_s=30)
    speeds = iter([1.0, 1.3, 1.0, 1.0])  # a blip (one fit probe between unfit ones), then a spell
    real_probe = fitness.probe

    def probe_then_change(p):
        state["speed"] = next(speeds)
        return real_probe(p)

    monkeypatch.setattr(fitness, "probe", probe_then_change)
    f = fitness.wait_until_fit(prof, max_wait_s=300, poll_s=30, streak=2)
    assert f.fit and next(speeds, None) is None  # the blip did not count: it waited for two fit probes in a row
    speeds = iter([1.0])  # a fit probe just before (a task's after-probe) opens the row: one more completes it
    assert fitness.wait_until_fit(prof, max_wait_s=300, poll_s=30, streak=2, carried=1).fit
    assert next(speeds, None) is None


def test_retime_pairs_rows_with_the_source_and_resumes(tmp_path):
    from shardplan.cost.collect import retime

    prof = get_profile("cpu-2c")
    src = tmp_path / "compute.parquet"
    first = collect_compute(prof, POOL, src, 4, seed=2, repeats=2, warmup=1)
    out = tmp_path / "retimed.parquet"
    pd.DataFrame([{"src_row": 0, **first.iloc[0][["seed", "sample", "source"]].to_dict(),
                   "fwd_ms": -1.0}]).to_parquet(out)  # row 0 as if done before a stop
    again = retime(prof, src, out)
    assert sorted(again["src_row"]) == [0, 1, 2, 3]
    assert again.loc[again.src_row == 0, "fwd_ms"].item() == -1.0  # not redone
    new = again.set_index("src_row").loc[[1, 2, 3]]
    assert list(new["sample"]) == list(first["sample"].iloc[1:])
    assert list(new["shards"]) == list(first["shards"].iloc[1:])
    assert list(new["id_seed"]) == list(first["sample"].iloc[1:])  # same ids as the first timing
    assert (new["fwd_ms"] > 0).all() and (new["attempts"] >= 1).all()


def test_foreign_shard_augmentation_adds_one_real_shard_of_another_set():
    import torch

    from shardplan.cost.model import _with_foreign_shard

    x = torch.arange(3 * 4 * 2, dtype=torch.float32).reshape(3, 4, 2)
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        grown, grown_mask = _with_foreign_shard(x, mask, gen)
        assert grown.shape == (3, 5, 2) and torch.equal(grown[:, :4], x)
        assert torch.equal(grown_mask[:, :4], mask) and (grown_mask[:, 4] == 1).all()
        valid = {tuple(x[i, j].tolist()) for i in range(3) for j in range(4) if mask[i, j]}
        assert all(tuple(v) in valid for v in grown[:, 4].tolist())  # never a padding slot


def test_committed_model_prices_a_hot_table_with_replicas_near_its_cost_alone():
    """The search once exploited the unpenalised model here: a 134-lookup table alone was
    predicted 20.8 ms, and 7.4 ms with two tiny data-parallel replicas beside it (both measure
    ~15 ms). The monotonicity penalty is soft: the model committed on 2026-11-22 gave 15.9 and 15.8 ms
    (the one before it 15.0 and 12.8); without the penalty, 20.8 and 7.4. This bar fails on the
    unpenalised model. The model committed on 2026-11-23 prices the replicas (another batch size) as an
    op of their own: 15.4 ms alone, 16.0 with them."""
    from shardplan.cost.estimator import load_estimator

    model = load_estimator("cpu-2c").compute
    hot = ShardSpec("hot", 52901, 0, 52901, 8, 133.8, 0.936, 8192)
    replicas = [ShardSpec("dp1", 200, 0, 200, 16, 5.1, 0.69, 1024),
                ShardSpec("dp2", 2638, 0, 2638, 4, 13.1, 0.607, 1024)]
    alone, grown = (sum(model.predict([s])) for s in ([hot], [hot] + replicas))
    assert grown[0] >= 0.8 * alone[0]


def test_grouped_sets_teach_ratios_not_levels():
    """Sets whose labels are right only up to one factor per group: learnt as groups they must not
    drag the level, as they do when taken at face value, and their ratios must still teach more
    than leaving them out."""
    sets, fwd, bwd = _synthetic(200)
    gsets, gf, gb = _synthetic(400, seed=2)
    groups = np.arange(400) // 10
    scale = np.random.default_rng(3).uniform(0.3, 3.0, 40)[groups]  # each group's level is off
    all_sets, all_f, all_b = sets + gsets, np.concatenate([fwd, gf * scale]), np.concatenate([bwd, gb * scale])
    kw = dict(profile="cpu-2c", epochs=60, hidden=32, code=16, group_tilt=False)  # a level, no tilt
    grouped = NeuralCostModel(**kw).fit(all_sets, all_f, all_b, progress=False,
                                        groups=np.concatenate([np.full(200, -1), groups]))
    naive = NeuralCostModel(**kw).fit(all_sets, all_f, all_b, progress=False)
    left_out = NeuralCostModel(group_weight=0.0, **kw).fit(all_sets, all_f, all_b, progress=False,
                                                           groups=np.concatenate([np.full(200, -1), groups]))
    test_sets, tf, tb = _synthetic(100, seed=1)
    err = {name: metrics(*m.predict(test_sets), tf, tb)["fwd+bwd"]["mape"]
           for name, m in (("grouped", grouped), ("naive", naive), ("left_out", left_out))}
    # 2026-11-22: 0.14 grouped, 0.24 naive, 0.21 left out
    assert err["grouped"] < 0.2 and err["grouped"] < 0.8 * min(err["naive"], err["left_out"]), err
    with pytest.raises(InputError, match="groups"):
        NeuralCostModel(**kw).fit(sets, fwd, bwd, groups=np.zeros(3))


def test_group_tilt_takes_a_size_dependent_slowdown_out_of_grouped_labels():
    """Grouped labels slowed per group by a factor that grows as the set gets shorter (a busy
    neighbour evicting the shared cache): with ``group_tilt`` the model must learn the true law
    better than when it takes the tilt for a ratio."""
    sets, fwd, bwd = _synthetic(200)
    gsets, gf, gb = _synthetic(400, seed=2)
    groups = np.arange(400) // 10
    rng = np.random.default_rng(4)
    size = (gf + gb) / np.median(gf + gb)
    slowed = rng.uniform(0.5, 2.0, 40)[groups] * size ** -rng.uniform(0.2, 0.5, 40)[groups]
    all_sets, all_f, all_b = sets + gsets, np.concatenate([fwd, gf * slowed]), np.concatenate([bwd, gb * slowed])
    labels = np.concatenate([np.full(200, -1), groups])
    kw = dict(profile="cpu-2c", epochs=60, hidden=32, code=16, group_weight=3.0)
    test_sets, tf, tb = _synthetic(100, seed=1)
    err = {tilt: metrics(*NeuralCostModel(group_tilt=tilt, **kw).fit(
        all_sets, all_f, all_b, progress=False, groups=labels).predict(test_sets), tf, tb)["fwd+bwd"]["mape"]
        for tilt in (True, False)}
    # 2026-11-22: 0.21 with the tilt taken out, 0.28 with it taken for a ratio
    assert err[True] < 0.85 * err[False], err


def test_random_level_learns_the_random_sets_level_apart_and_predicts_the_plan_ranks(tmp_path):
    """Random sets timed 20% faster than the law (their own level) beside a few sets at the law's level:
    with ``random_level`` the model must predict the law's level (and the random one on request), and
    keep it through save and load; without it the random sets drag the level down."""
    sets, fwd, bwd = _synthetic(400)
    rsets, rf, rb = sets[:300], fwd[:300] * 0.8, bwd[:300] * 0.8
    psets, pf_, pb_ = sets[300:], fwd[300:], bwd[300:]
    all_sets, all_f, all_b = rsets + psets, np.concatenate([rf, pf_]), np.concatenate([rb, pb_])
    marked = np.arange(400) < 300
    kw = dict(profile="cpu-2c", epochs=200, hidden=32, code=16)  # 2026-11-22: at 60 the offset is not there yet
    leveled = NeuralCostModel(random_level=True, **kw).fit(all_sets, all_f, all_b, progress=False, random_sets=marked)
    plain = NeuralCostModel(**kw).fit(all_sets, all_f, all_b, progress=False, random_sets=marked)
    test_sets, tf, tb = _synthetic(100, seed=1)
    bias = lambda m, **k: float(np.median(np.sum(m.predict(test_sets, **k), axis=0) / (tf + tb)) - 1)  # noqa: E731
    # 2026-11-22: leveled -1.5% (offset 0.80 / 0.82), plain -15%
    assert abs(bias(leveled)) < 0.06, bias(leveled)
    assert bias(plain) < -0.1, bias(plain)  # mostly the random sets' level
    assert abs(bias(leveled, random_level=True) + 0.2) < 0.06
    assert np.allclose(np.exp(leveled.random_offset), 0.8, atol=0.06)
    leveled.save(tmp_path / "m.json")
    assert np.allclose(NeuralCostModel.load(tmp_path / "m.json").predict(test_sets, random_level=True)[0],
                       leveled.predict(test_sets, random_level=True)[0], rtol=1e-5)
    with pytest.raises(InputError, match="random_sets"):
        NeuralCostModel(**kw).fit(sets, fwd, bwd, random_sets=np.zeros(3))
    with pytest.raises(InputError, match="to set the level"):  # every set random: the level would float
        NeuralCostModel(random_level=True, **kw).fit(sets, fwd, bwd, random_sets=np.ones(len(sets)))


def _two_op_sets(n: int, seed: int = 0):
    """Sets whose shards are fed one of two batch sizes (sharded tables and data-parallel replicas);
    like the timer, a set runs one op per batch size, each with its own overhead, and the times add."""
    rng = np.random.default_rng(seed)
    sets, fwd, bwd = [], [], []
    for _ in range(n):
        specs = []
        for _ in range(int(rng.integers(1, 7))):
            rows = int(rng.integers(100, 10_000))
            specs.append(ShardSpec(f"t{rng.integers(100)}", rows, 0, rows, int(rng.choice([8, 16, 64])),
                                   float(rng.uniform(1, 20)), 0.0, int(rng.choice([1024, 128]))))
        ops = [[s for s in specs if s.batch_size == b] for b in {s.batch_size for s in specs}]
        work = [1.0 + sum(s.pooling_factor * s.cols * s.batch_size for s in op) / 100_000.0 for op in ops]
        sets.append(specs)
        fwd.append(sum(work))
        bwd.append(2 * sum(work))
    return sets, np.array(fwd), np.array(bwd)


def test_split_batches_prices_a_set_as_the_sum_of_its_one_batch_parts(tmp_path):
    from shardplan.cost.model import batch_parts

    sets, fwd, bwd = _two_op_sets(400)
    kw = dict(profile="cpu-2c", epochs=60, hidden=32, code=16)
    split = NeuralCostModel(**kw).fit(sets, fwd, bwd, progress=False)
    joint = NeuralCostModel(split_batches=False, **kw).fit(sets, fwd, bwd, progress=False)
    mixed = next(s for s in sets if len({x.batch_size for x in s}) == 2)
    parts, owner = batch_parts([mixed, mixed[:1]])
    assert owner.tolist() == [0, 0, 1] and parts[2] == mixed[:1]
    assert all(len({x.batch_size for x in p}) == 1 for p in parts)  # each part one batch size, and together
    assert sorted(parts[0] + parts[1], key=repr) == sorted(mixed, key=repr)  # they hold the set's shards
    whole, pieces = np.array(split.predict([mixed])), np.array(split.predict(parts[:2]))
    assert whole[:, 0] == pytest.approx(pieces.sum(axis=1), rel=1e-5)
    # The flag is saved; files from before it predict as they were trained (one set, one op).
    split.save(tmp_path / "m.json")
    assert NeuralCostModel.load(tmp_path / "m.json").split_batches
    state = json.loads((tmp_path / "m.json").read_text())
    del state["hyper"]["split_batches"]
    (tmp_path / "old.json").write_text(json.dumps(state))
    assert not NeuralCostModel.load(tmp_path / "old.json").split_batches
    # On sets that run as two ops, the split model learns the law better than one set, one op.
    test_sets, tf, tb = _two_op_sets(200, seed=1)
    two = np.array([len({x.batch_size for x in s}) == 2 for s in test_sets])
    err = {name: metrics(*(p[two] for p in m.predict(test_sets)), tf[two], tb[two])["fwd+bwd"]["mape"]
           for name, m in (("split", split), ("joint", joint))}
    # 2026-11-23: 5.7% split, 8.5% joint
    assert err["split"] < 0.8 * err["joint"], err


def test_ids_drawn_as_tensors_feed_the_op_as_arrays_do():
    """The GPU's input path (ids drawn by torch, concatenated as tensors), run on CPU: the same op
    inputs as NumPy's path would give for the same bags."""
    import torch

    from shardplan.cost.ids import Bags, shard_bags_torch, table_bags_torch
    from shardplan.cost.kernel import FusedOp, ShardInput, _inputs

    whole = table_bags_torch("x", 5000, 8.0, 1.0, 256, seed=1)
    part = shard_bags_torch(table_bags_torch("y", 800, 3.0, 0.0, 256, seed=1), 400, 400)
    as_tensors = [ShardInput(5000, 32, whole), ShardInput(400, 8, part)]
    as_arrays = [ShardInput(s.rows, s.cols, Bags(s.bags.lengths.numpy(), s.bags.ids.numpy())) for s in as_tensors]
    for a, b in zip(_inputs(as_tensors, torch.device("cpu")), _inputs(as_arrays, torch.device("cpu"))):
        assert torch.equal(a, b)
    t = FusedOp(as_tensors).run(warmup=1, repeats=3)
    assert t.fwd_ms > 0 and t.bwd_ms > 0


def test_touched_bytes_counts_the_distinct_rows_a_batch_hits_times_their_width():
    from shardplan.cost.features import touched_bytes
    from shardplan.cost.ids import table_bags

    # against the ids the timer feeds: distinct rows of a drawn batch, times the row's bytes
    spec = ShardSpec("t_touch", 100_000, 0, 100_000, 16, 20.0, 0.9, 1024)
    drawn = len(np.unique(table_bags(spec.table, spec.table_rows, spec.pooling_factor, spec.zipf_alpha,
                                     spec.batch_size).ids))
    # 2026-11-24: 10,603 expected, 10,220 drawn (the law's tail is taken as uniform, which spreads it most)
    assert touched_bytes([spec]) == pytest.approx(drawn * 16 * 4, rel=0.05)
    big = ShardSpec("u", 10_000_000, 0, 10_000_000, 16, 1.0, 0.0, 1024)  # 1,024 uniform ids over 10M rows
    assert touched_bytes([big]) == pytest.approx(1024 * 16 * 4, rel=0.01)
    assert touched_bytes([spec, big]) == pytest.approx(touched_bytes([spec]) + touched_bytes([big]))
    assert touched_bytes([spec], bytes_per_float=2) == pytest.approx(touched_bytes([spec]) / 2)


def test_long_ranks_count_more_in_training_only_when_asked():
    from shardplan.cost.train import LONG_RANK_MAX, RANK_SAMPLE_WEIGHT, rank_weights
    ms = np.array([2.0, 9.0, 16.0, 26.0, 80.0])
    assert rank_weights(ms).tolist() == [RANK_SAMPLE_WEIGHT] * 5
    assert rank_weights(ms, long_ranks=True).tolist() == [RANK_SAMPLE_WEIGHT * k for k in (1, 1, 2, 3, LONG_RANK_MAX)]


def test_default_draws_are_the_committed_collections_sets():
    # Sample i of a seed is one set: the committed files were drawn by this code, default and targeted
    from shardplan.cli import COLLECT_POOLS
    from shardplan.pools import load_pool

    pool = [t for name in COLLECT_POOLS for t in load_pool(name)]
    for profile, seed, max_shards, shape in (
            ("cpu-2c", 0, 15, SetShape()),
            ("cpu-2c-xeon", 4, 3, SetShape(min_table_rows=500_000, min_pooling=20, min_cols=64)),
            ("h100", 2, 15, SetShape(row_share=0.8, row_splits=(2, 4, 8, 16)))):
        prof = get_profile(profile)
        name = "compute-row-slices-third-h100.parquet" if profile == "h100" else "compute.parquet"
        rows = pd.read_parquet(prof.dir / name, columns=["seed", "sample", "shards"])
        rows = rows[rows["seed"] == seed].head(30)
        min_shards = 4 if profile == "h100" else 1
        assert len(rows) == 30
        for sample, shards in zip(rows["sample"], rows["shards"]):
            drawn = random_sample(np.random.default_rng([seed, int(sample)]), pool, prof, min_shards, max_shards, shape)
            assert drawn == specs_from_json(shards), (profile, seed, sample)


def test_row_slice_collection_cuts_more_shards():
    prof = get_profile("cpu-2c")
    sliced = [random_sample(np.random.default_rng([2, i]), POOL, prof, 4, 15, SetShape(row_share=0.9, row_splits=(16,)))
              for i in range(40)]
    cut = [s for specs in sliced for s in specs if s.rows < s.table_rows]
    share = len(cut) / sum(len(specs) for specs in sliced)
    assert share > 0.6  # about 0.9, less the tables too small to cut
    assert all(-(-s.table_rows // 16) >= s.rows for s in cut)  # a sixteenth of the table (the last part less)
    short = [Table(f"s{r}", r, 4, 2.0) for r in range(64, 400, 7)]  # tables too short for 16 full parts
    cuts = [s for i in range(200) for s in random_sample(np.random.default_rng([3, i]), short, prof, 4, 15,
                                                          SetShape(row_share=1.0, row_splits=(16,)))]
    assert cuts and all(0 < s.rows and s.row_offset + s.rows <= s.table_rows for s in cuts)


def test_replica_sets_add_a_data_parallel_op_at_the_local_batch():
    prof = get_profile("h100")
    pool = POOL + [Table(f"tiny{i}", 3 + 10 * i, 8, 1.0) for i in range(40)]
    shape = SetShape(replica_share=1.0, replica_worlds=(4, 16), replica_max_rows=400)
    sets = [random_sample(np.random.default_rng([3, i]), pool, prof, 4, 15, shape) for i in range(60)]
    with_op = 0
    for specs in sets:
        batches = sorted({s.batch_size for s in specs})
        assert len(batches) <= 2
        if len(batches) == 1:
            continue  # every replica drawn was a table the set already shards
        with_op += 1
        local, full = batches
        assert full in prof.collect_batch_sizes and full // local in (4, 16)
        replicas = [s for s in specs if s.batch_size == local]
        assert 1 <= len(replicas) <= 5
        assert all(s.rows == s.table_rows <= 400 and s.row_offset == 0 for s in replicas)  # whole small tables
        sharded = {s.table for s in specs if s.batch_size == full}
        assert not sharded & {s.table for s in replicas}  # a table is sharded or replicated, not both
        assert sum(s.rows * s.cols * 4 for s in specs) <= prof.max_sample_weight_bytes
    assert with_op >= 50
    half = [random_sample(np.random.default_rng([3, i]), pool, prof, 4, 15, SetShape(replica_share=0.5))
            for i in range(200)]
    assert 70 <= sum(len({s.batch_size for s in specs}) == 2 for specs in half) <= 130
    with pytest.raises(InputError, match="--replica-max-rows"):
        random_sample(np.random.default_rng(0), POOL, prof, shape=SetShape(replica_share=1.0, replica_max_rows=100))


def test_replica_sets_are_timed_as_two_ops(tmp_path):
    # Each batch's op timed in turn and summed (kernel.RankOp), as a rank with replicas runs; the model
    # prices the two parts apart (model.batch_parts)
    from shardplan.cost.model import batch_parts

    pool = POOL + [Table("tiny", 30, 8, 1.0)]
    # the sharded tables at 500 rows or more; the replica comes from the whole pool all the same
    shape = SetShape(min_table_rows=500, replica_share=1.0, replica_worlds=(2,), replica_max_rows=100)
    df = collect_compute(get_profile("cpu-2c"), pool, tmp_path / "c.parquet", 2, seed=7, repeats=2, warmup=1,
                         shape=shape)
    sets = [specs_from_json(x) for x in df["shards"]]
    assert all({s.batch_size for s in specs} == {b, b // 2} for specs, b in zip(sets, df["batch_size"]))
    assert all(s.table == "tiny" for specs, b in zip(sets, df["batch_size"]) for s in specs if s.batch_size < b)
    assert (df["fwd_ms"] > 0).all() and all(len(specs) == n for specs, n in zip(sets, df["num_shards"]))
    parts, owner = batch_parts(sets)
    assert owner.tolist() == [0, 0, 1, 1]


def test_collect_compute_refuses_bad_draw_knobs(tmp_path, capsys):
    from shardplan.cli import main

    cases = [(["--row-share", "1.5"], "--row-share"), (["--row-splits", "1,2"], "--row-splits"),
             (["--row-splits", "four"], "--row-splits"), (["--replica-share", "-0.1"], "--replica-share"),
             (["--replica-worlds", "1,4"], "--replica-worlds"), (["--replica-worlds", ""], "--replica-worlds"),
             (["--replica-max-rows", "0"], "--replica-max-rows"), (["--min-table-rows", "-1"], "--min-table-rows"),
             (["--replica-share", "1", "--pools", "meta_synthetic", "--replica-max-rows", "1"], "--replica-max-rows"),
             (["--min-table-rows", "10000000000"], "--min-table-rows"),
             (["--batch-sizes", "512,0"], "--batch-sizes"), (["--batch-sizes", "512,x"], "--batch-sizes"),
             (["--batch-sizes", ""], "--batch-sizes"),
             (["--min-shards", "5", "--max-shards", "4"], "--min-shards")]  # --min-shards 0: argparse's (test_cli_...)
    for flags, field in cases:
        out = tmp_path / "c.parquet"
        assert main(["collect", "compute", "--samples", "1", "--out", str(out), *flags]) == 2
        assert field in capsys.readouterr().err and not out.exists()


def test_huber_loss_lets_labels_a_neighbour_slowed_pull_the_fit_less(tmp_path):
    """A fifth of the labels slowed 1.5-3x (one-sided, as a busy neighbour slows a timing): the model
    fitted with ``huber_delta`` must sit nearer the true times than the squared loss's, and keep its
    delta through a save."""
    sets, fwd, bwd = _synthetic(400)
    rng = np.random.default_rng(5)
    slowed = np.where(rng.random(400) < 0.2, rng.uniform(1.5, 3.0, 400), 1.0)
    kw = dict(profile="cpu-2c", epochs=60, hidden=32, code=16)
    test_sets, tf, tb = _synthetic(100, seed=1)
    models = {delta: NeuralCostModel(huber_delta=delta, **kw).fit(sets, fwd * slowed, bwd * slowed, progress=False)
              for delta in (None, 0.1)}
    bias = {delta: float(np.median(np.log(np.add(*m.predict(test_sets)) / (tf + tb)))) for delta, m in models.items()}
    # 2026-12-06: median log error +0.171 squared, +0.031 with delta 0.1
    assert bias[None] > 0.05 and abs(bias[0.1]) < 0.6 * bias[None], bias
    models[0.1].save(tmp_path / "m.json")
    assert NeuralCostModel.load(tmp_path / "m.json").huber_delta == 0.1
    for bad in (0.0, -0.1):
        with pytest.raises(InputError, match="huber_delta"):
            NeuralCostModel(profile="cpu-2c", huber_delta=bad)
