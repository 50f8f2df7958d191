import json

import pytest

from shardplan.errors import InputError
from shardplan.formats import load_plan, load_task, plan_to_dict, save_plan, save_task, task_to_dict


def test_task_round_trip_keeps_unknown_fields(task_dict, tmp_path):
    task_dict["owner"] = "ads-ranking"
    task_dict["tables"][0]["reuse_histogram"] = [0.5, 0.3, 0.2]
    task = load_task(task_dict)
    assert task.table("a").zipf_alpha == 1.05
    assert task.table("b").zipf_alpha == 0.0  # default
    save_task(task, tmp_path / "t.json")
    again = json.loads((tmp_path / "t.json").read_text())
    assert again["owner"] == "ads-ranking"
    assert again["tables"][0]["reuse_histogram"] == [0.5, 0.3, 0.2]
    assert load_task(tmp_path / "t.json") == task


def test_task_defaults(task_dict):
    del task_dict["topology"]["local_world_size"], task_dict["topology"]["memory_per_rank_gb"]
    del task_dict["batch_size_per_rank"], task_dict["optimizer"]
    task = load_task(task_dict)
    assert task.topology.local_world_size == 2
    assert task.topology.memory_per_rank_gb == 4.0
    assert task.batch_size_per_rank == 512 and task.optimizer == "sgd" and task.dtype == "fp32"


def test_plan_round_trip(plan_dict, tmp_path):
    plan_dict["search"] = {"searcher": "hand", "seed": 0, "seconds": 0.0}
    plan = load_plan(plan_dict)
    save_plan(plan, tmp_path / "p.json")
    assert load_plan(tmp_path / "p.json") == plan
    assert plan_to_dict(plan)["tables"] == plan_dict["tables"]


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d["tables"][1].__setitem__("num_embeddings", "500"), "tables[1].num_embeddings"),
    (lambda d: d["tables"][0].__setitem__("num_embeddings", -5), "tables[0].num_embeddings"),
    (lambda d: d["tables"][0].__setitem__("pooling_factor", -1.0), "tables[0].pooling_factor"),
    (lambda d: d["tables"][2].__setitem__("embedding_dim", 30), "tables[2]"),
    (lambda d: d["tables"][2].pop("embedding_dim"), "tables[2].embedding_dim"),
    (lambda d: d["topology"].__setitem__("world_size", 0), "topology.world_size"),
    (lambda d: d["topology"].__setitem__("local_world_size", 3), "topology"),
    (lambda d: d["topology"].__setitem__("device", "tpu"), "topology.device"),
    (lambda d: d.__setitem__("optimizer", "lamb"), "optimizer"),
    (lambda d: d.__setitem__("format", "shardplan/task@2"), "format"),
    (lambda d: d["tables"][1].__setitem__("name", "a"), "tables"),
    (lambda d: d.__setitem__("tables", []), "tables"),
])
def test_bad_task_names_the_field(task_dict, mutate, field):
    mutate(task_dict)
    with pytest.raises(InputError) as e:
        load_task(task_dict)
    assert e.value.field == field, str(e.value)


def test_malformed_json(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "shardplan/task@1", "tables": [')
    with pytest.raises(InputError, match="malformed JSON at line 1"):
        load_task(bad)
    with pytest.raises(InputError, match="no such file"):
        load_task(tmp_path / "missing.json")
    (tmp_path / "list.json").write_text("[1]")
    with pytest.raises(InputError, match="must be a JSON object"):
        load_task(tmp_path / "list.json")


def test_bad_plan_shard(plan_dict):
    plan_dict["tables"][0]["shards"][0]["num_rows"] = 0
    with pytest.raises(InputError) as e:
        load_plan(plan_dict)
    assert e.value.field == "tables[0].shards[0].num_rows"


def test_task_to_dict_is_loadable(task_dict):
    assert load_task(task_to_dict(load_task(task_dict))) == load_task(task_dict)


def test_the_package_exports_its_public_api_and_nothing_it_merely_imported() -> None:
    """``__all__`` names what users may rely on: each name exists, and helpers the package imports for itself
    (``importlib.metadata``'s) do not leak into ``from shardplan import *``."""
    import shardplan

    assert all(hasattr(shardplan, name) for name in shardplan.__all__)
    assert {"plan", "evaluate", "load_task", "save_plan", "to_torchrec_plan", "__version__"} <= set(shardplan.__all__)
    namespace: dict = {}
    exec("from shardplan import *", namespace)
    assert "version" not in namespace and "PackageNotFoundError" not in namespace
