import pytest

from shardplan.errors import InputError
from shardplan.formats import load_plan
from shardplan.memory import GB, rank_memory, rank_memory_gb, received_bytes, shard_bytes
from shardplan.validate import plan_problems, validate_plan


def test_valid_plan(plan_dict):
    plan = load_plan(plan_dict)
    assert plan_problems(plan) == []
    validate_plan(plan)


def test_overlap_detected(plan_dict):
    plan_dict["tables"][1]["shards"][1]["row_offset"] = 200  # rows 200..450 overlap 0..250
    probs = plan_problems(load_plan(plan_dict))
    assert any("overlap" in p for p in probs), probs


def test_gap_detected(plan_dict):
    plan_dict["tables"][1]["shards"][1]["num_rows"] = 200  # rows 450..500 uncovered
    probs = plan_problems(load_plan(plan_dict))
    assert any("gap" in p for p in probs), probs


def test_outside_table_detected(plan_dict):
    plan_dict["tables"][2]["shards"][1]["num_cols"] = 20  # cols 16..36 of a 32-dim table
    assert any("outside" in p for p in plan_problems(load_plan(plan_dict)))


def test_rank_out_of_range(plan_dict):
    plan_dict["tables"][0]["shards"][0]["rank"] = 2
    assert any("out of range" in p for p in plan_problems(load_plan(plan_dict)))


def test_missing_and_duplicate_and_unknown_tables(plan_dict):
    dup = dict(plan_dict["tables"][0])
    plan_dict["tables"][1] = dup
    probs = plan_problems(load_plan(plan_dict))
    assert any("more than once" in p for p in probs)
    assert any("no sharding" in p and "'b'" in p for p in probs)
    plan_dict["tables"][1] = dict(dup, name="zzz")
    assert any("no table of that name" in p for p in plan_problems(load_plan(plan_dict)))


def test_over_capacity_rank(plan_dict):
    plan = load_plan(plan_dict)
    used = rank_memory_gb(plan)
    plan_dict["task"]["topology"]["memory_per_rank_gb"] = max(used) * 0.9
    with pytest.raises(InputError, match="over memory_per_rank_gb"):
        validate_plan(load_plan(plan_dict))


def test_memory_accounts_optimizer_state(plan_dict):
    sgd = sum(rank_memory_gb(load_plan(plan_dict)))
    plan_dict["task"]["optimizer"] = "rowwise_adagrad"
    ada = sum(rank_memory_gb(load_plan(plan_dict)))
    rows = 1000 + 500 + 2000 * 2  # column-wise: both blocks keep per-row state
    assert ada - sgd == pytest.approx(rows * 4 / 1024**3)


def test_sharding_type_layout(plan_dict):
    plan_dict["tables"][0]["sharding_type"] = "column_wise"
    plan_dict["tables"][0]["shards"][0]["num_rows"] = 500
    plan_dict["tables"][0]["shards"].append({"rank": 1, "row_offset": 500, "num_rows": 500, "col_offset": 0,
                                            "num_cols": 16})
    assert any("column_wise shards must each hold all" in p for p in plan_problems(load_plan(plan_dict)))


def test_data_parallel_needs_full_copy_per_rank(plan_dict):
    full = {"row_offset": 0, "num_rows": 500, "col_offset": 0, "num_cols": 8}
    plan_dict["tables"][1] = {"name": "b", "sharding_type": "data_parallel",
                              "shards": [dict(full, rank=0), dict(full, rank=1)]}
    assert plan_problems(load_plan(plan_dict)) == []
    plan_dict["tables"][1]["shards"].pop()
    assert any("data_parallel" in p for p in plan_problems(load_plan(plan_dict)))


def test_every_rank_holds_the_received_embeddings(plan_dict):
    """Whatever its shards, a rank holds its local batch's pooled embeddings of all tables, and their
    gradient, after the all-to-all; the plan's memory counts them and the validator checks them."""
    plan = load_plan(plan_dict)
    task = plan.task
    recv = received_bytes(task)
    assert recv == 2 * task.batch_size_per_rank * sum(t.embedding_dim for t in task.tables) * 4
    for parts, items in zip(rank_memory(plan), plan.rank_shards()):
        assert parts.total == recv + sum(shard_bytes(task, t, st, sh) for t, st, sh in items)
    shards_only = max(m.total for m in rank_memory(plan)) - recv
    plan_dict["task"]["topology"]["memory_per_rank_gb"] = (shards_only + recv / 2) / GB  # the shards fit, not all
    with pytest.raises(InputError, match="over memory_per_rank_gb"):
        validate_plan(load_plan(plan_dict))
