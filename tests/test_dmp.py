"""Plan-to-trainer: a real two-process TorchRec DistributedModelParallel run over gloo."""
from __future__ import annotations

import dataclasses

import pytest

import shardplan
from shardplan.domain import Plan, Shard, TableSharding
from shardplan.errors import InputError
from shardplan.execute.dmp import GLOO_TYPES, check_runnable, memory_rows, train_with_plan
from shardplan.memory import rank_memory

TABLES = [{"name": "user", "num_embeddings": 20_000, "embedding_dim": 16, "pooling_factor": 4.0, "zipf_alpha": 1.05},
          {"name": "item", "num_embeddings": 5_000, "embedding_dim": 8, "pooling_factor": 2.0},
          {"name": "ctx", "num_embeddings": 300, "embedding_dim": 32, "pooling_factor": 8.0, "zipf_alpha": 0.8}]


@pytest.fixture(scope="module")
def task():
    return shardplan.make_task(TABLES, 2, batch_size_per_rank=128, memory_per_rank_gb=1.0)


def test_two_process_dmp_trains_with_a_shardplan_plan(task) -> None:
    plan = shardplan.plan(task, searcher="neuroshard", sharding_types=GLOO_TYPES)
    assert {t.sharding_type for t in plan.tables} <= set(GLOO_TYPES)
    result = train_with_plan(plan, iterations=60, warmup=2)
    assert result.world_size == 2 and result.backend == "gloo" and len(result.losses) == 60
    assert result.samples_per_s > 0
    assert result.loss_fell, result.losses


def test_the_trainer_starts_its_ranks_through_the_retrying_spawn(task, fake_spawn) -> None:
    """An abort in the runtime, then success: ``train_with_plan`` reads the second attempt's files
    (``spawn_ranks``' own cases are in tests/test_processes.py)."""
    import numpy as np

    def ranks_write_their_files(args, nprocs) -> None:
        for r in range(nprocs):
            np.savez(args[-1] / f"rank{r}.npz", seconds=1.0, losses=np.ones(3), weights_bytes=1, state_bytes=0,
                     peak_growth_bytes=-1)

    plan = shardplan.plan(task, searcher="neuroshard", sharding_types=GLOO_TYPES)
    calls = fake_spawn(["abort", "ok"], ranks_write_their_files)
    assert train_with_plan(plan, iterations=3, warmup=0).losses == [1.0] * 3 and len(calls) == 2


@pytest.mark.parametrize("optimizer", ["rowwise_adagrad", "adagrad"])
def test_column_wise_and_data_parallel_run_on_gloo_and_allocate_what_the_plan_says(optimizer) -> None:
    task = shardplan.make_task(TABLES, 2, batch_size_per_rank=128, memory_per_rank_gb=1.0, optimizer=optimizer)
    both_ranks = TableSharding("user", "column_wise", (Shard(0, 0, 20_000, 0, 8), Shard(1, 0, 20_000, 8, 8)))
    plan = Plan(task=task, tables=(
        both_ranks, TableSharding("item", "table_wise", (Shard(1, 0, 5_000, 0, 8),)),
        TableSharding("ctx", "data_parallel", (Shard(0, 0, 300, 0, 32), Shard(1, 0, 300, 0, 32)))))
    shardplan.validate_plan(plan)
    result = train_with_plan(plan, iterations=3, warmup=1)
    assert result.samples_per_s > 0
    # TorchRec's allocation, counted in the trainer, equals the plan's memory model byte for byte
    predicted = rank_memory(plan)
    assert [a["weights"] for a in result.allocated] == [m.weights for m in predicted] == [
        (20_000 * 8 + 300 * 32) * 4, (20_000 * 8 + 5_000 * 8 + 300 * 32) * 4]
    assert [a["optimizer_state"] for a in result.allocated] == [m.optimizer_state for m in predicted]
    assert predicted[0].optimizer_state == ((20_000 + 300) * 4 if optimizer == "rowwise_adagrad"
                                            else predicted[0].weights)
    rows = memory_rows(plan, result)
    assert all(r["kept_equal"] for r in rows)
    assert rows[1]["weights_plan"] == rows[1]["weights_torchrec"] and rows[1]["plan_total_with_buffers"] > rows[1][
        "weights_plan"] + rows[1]["optimizer_plan"]


def test_row_wise_on_gloo_is_refused_by_name(task) -> None:
    plan = Plan(task=task, tables=(
        TableSharding("user", "row_wise", (Shard(0, 0, 10_000, 0, 16), Shard(1, 10_000, 10_000, 0, 16))),
        TableSharding("item", "table_wise", (Shard(1, 0, 5_000, 0, 8),)),
        TableSharding("ctx", "table_wise", (Shard(0, 0, 300, 0, 32),))))
    with pytest.raises(InputError, match=r"user \(row_wise\).*--sharding-types table_wise,column_wise"):
        check_runnable(plan, "gloo")
    check_runnable(plan, "nccl")  # NCCL runs it
    adam = Plan(task=dataclasses.replace(task, optimizer="adam"), tables=plan.tables[1:] + (
        TableSharding("user", "table_wise", (Shard(0, 0, 20_000, 0, 16),)),))
    with pytest.raises(InputError, match="task.optimizer.*no fused 'adam'"):
        check_runnable(adam, "gloo")


def test_restricting_sharding_types(task) -> None:
    with pytest.raises(InputError, match="table_wise is required"):
        shardplan.plan(task, sharding_types=["column_wise"])
    with pytest.raises(InputError, match=r"^sharding_types: must be a list"):
        shardplan.plan(task, sharding_types="table_wise")
    tight = shardplan.make_task(TABLES, 2, batch_size_per_rank=128, memory_per_rank_gb=0.001)  # user > one rank
    for searcher in ("neuroshard", "greedy-size", "round-robin"):
        assert any(t.sharding_type == "row_wise" for t in shardplan.plan(tight, searcher=searcher).tables)
    # gloo has no row-wise, and the table is too big for one rank: each searcher says so
    with pytest.raises(InputError, match="neither row_wise nor table_row_wise is allowed"):
        shardplan.plan(tight, sharding_types=GLOO_TYPES)
    with pytest.raises(InputError, match=r"^tables\[0\]: 'user' needs .*whole, nor spread data_parallel"):
        shardplan.plan(tight, searcher="greedy-size", sharding_types=GLOO_TYPES)
    from shardplan.search import SEARCHERS

    pinned = shardplan.load_task({**shardplan.formats.task_to_dict(task), "tables": [
        {**t, "sharding_types": ["row_wise"]} if t["name"] == "user" else t for t in TABLES]})
    with pytest.raises(InputError, match=r"^tables\[0\]\.sharding_types: 'user' may only be \['row_wise'\]"):
        shardplan.plan(pinned, searcher="greedy-size", sharding_types=GLOO_TYPES)
    for searcher in sorted(set(SEARCHERS) - {"neuroshard-optuna"}):  # the tuned beam is the beam's
        plan = shardplan.plan(task, searcher=searcher, sharding_types=GLOO_TYPES)
        assert {t.sharding_type for t in plan.tables} <= set(GLOO_TYPES), searcher


def test_dmp_suite_script_trains_every_plan_and_writes_its_table(task, tmp_path, monkeypatch, load_script) -> None:
    import json
    import sys

    from shardplan.formats import task_to_dict

    suite = load_script("bench/dmp_suite.py")
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "t.json").write_text(json.dumps(task_to_dict(task)))
    monkeypatch.setattr(sys, "argv", ["dmp_suite.py", "--suite", str(tmp_path / "suite"), "--iterations", "4",
                                      "--warmup", "1", "--rounds", "1", "--out", str(tmp_path / "out"), "--name", "t",
                                      "--peers", "torchrec,greedy-lookup"])
    suite.main()
    text = (tmp_path / "out" / "dmp-suite-t.md").read_text()
    for peer in ("torchrec", "greedy-lookup"):
        assert f"Against `{peer}`: geometric mean time ratio over 1 tasks" in text
    row = (tmp_path / "out" / "dmp-suite-t.csv").read_text().splitlines()
    assert len(row) == 2 and not list((tmp_path / "out").glob("*.partial*"))  # one task; no leftovers


def test_dmp_memory_script_sets_the_allocation_beside_every_plan(task, tmp_path, monkeypatch, load_script) -> None:
    import json
    import sys

    import pandas as pd

    from shardplan.formats import task_to_dict

    script = load_script("bench/dmp_memory.py")
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "t.json").write_text(json.dumps(task_to_dict(task)))
    monkeypatch.setattr(sys, "argv", ["dmp_memory.py", "--suite", str(tmp_path / "suite"), "--iterations", "2",
                                      "--out", str(tmp_path / "out"), "--name", "t"])
    script.main()
    text = (tmp_path / "out" / "dmp-memory-t.md").read_text()
    assert "4 ranks of 2 plans (1 tasks) trained" in text and "allocation, to the byte, on 4 of 4 ranks" in text
    df = pd.read_csv(tmp_path / "out" / "dmp-memory-t.csv")
    assert set(df.plan) == {"shardplan", "torchrec"} and (df.peak_growth > df.weights_torchrec).all()
    assert not list((tmp_path / "out").glob("*.partial*"))


def test_dmp_suite_pools_calls_and_compares_a_peer_only_over_its_own_calls(load_script) -> None:
    import pandas as pd

    suite = load_script("bench/dmp_suite.py")
    common = {"task": "t", "ranks": 2, "tables": 3, "shardplan_predicted_ms": 10.0, "torchrec_predicted_ms": 12.0}
    first = pd.DataFrame([{**common, "shardplan_runs": "[100, 110, 120]", "torchrec_runs": "[90, 95, 100]"}])
    second = pd.DataFrame([{**common, "shardplan_runs": "[60, 70, 80]", "torchrec_runs": "[50, 55, 60]",
                            "greedy-lookup_runs": "[35, 35, 35]", "greedy-lookup_predicted_ms": 11.0}])
    row = suite.pool([first, second]).iloc[0]
    assert row.shardplan_samples_per_s == 90.0 and row.torchrec_samples_per_s == 75.0  # medians of six runs
    assert row.time_ratio_vs_torchrec == 75.0 / 90.0
    assert row["time_ratio_vs_greedy-lookup"] == 35 / 70  # over call 2 only, the one that trained it
    second.loc[0, "torchrec_predicted_ms"] = 13.0  # another plan: its runs cannot be pooled with the first's
    with pytest.raises(InputError, match="torchrec plans differ"):
        suite.pool([first, second])


def test_the_replica_op_backprops_what_an_embedding_bag_does() -> None:
    """TorchRec's data-parallel tables run FBGEMM's dense op, whose CPU backward goes through PyTorch's
    (deprecated) autograd fallback; the trainer relies on its gradients being right."""
    import torch
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import DenseTableBatchedEmbeddingBagsCodegen

    torch.manual_seed(0)
    op = DenseTableBatchedEmbeddingBagsCodegen([(300, 32)], use_cpu=True)
    ids, offsets = torch.randint(0, 300, (500,)), torch.arange(0, 501, 5)
    ref = torch.nn.EmbeddingBag(300, 32, mode="sum")
    ref.weight.data.copy_(op.weights.detach().view(300, 32))
    upstream = torch.randn(100, 32)
    (op(ids, offsets) * upstream).sum().backward()
    (ref(ids, offsets[:-1]) * upstream).sum().backward()
    assert torch.allclose(op.weights.grad.view(300, 32), ref.weight.grad, atol=1e-5)
    assert ref.weight.grad.abs().sum() > 0
