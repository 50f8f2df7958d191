from __future__ import annotations

import copy
import importlib.util
import sys
from pathlib import Path

import pytest

from shardplan.cost import kernel, profiles
from shardplan.cost.collect import collect_compute
from shardplan.cost.model import NeuralCostModel
from shardplan.cost.profiles import get_profile
from shardplan.cost.specs import specs_from_json
from shardplan.domain import Table

ROOT = Path(__file__).resolve().parents[1]
AMD, INTEL = "AMD EPYC", "Intel(R) Xeon(R) Processor"


@pytest.fixture(scope="session", autouse=True)
def _no_retry_pause():
    """Disturbed timings are still retried, and the quietest attempt kept, without the wait between
    attempts that lets a burst pass on the shared VM: the tests check what is retried, not the wait."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernel, "RETRY_PAUSE_S", 0.0)
        yield


@pytest.fixture
def load_script(monkeypatch):
    """A repository script (``bench/x.py``) imported as a module the way it runs: its folder on
    ``sys.path`` (its sibling imports) and the module in ``sys.modules`` (dataclasses look it up there)."""
    def load(relpath: str):
        path = ROOT / relpath
        monkeypatch.syspath_prepend(str(path.parent))
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, spec.name, module)
        spec.loader.exec_module(module)
        return module
    return load


POOL = [Table(f"p{i}", 300 * (i + 1), 16, 1.0 + i, 0.2 * i) for i in range(8)]

TASK = {
    "format": "shardplan/task@1",
    "name": "tiny",
    "tables": [
        {"name": "a", "num_embeddings": 1000, "embedding_dim": 16, "pooling_factor": 4.0, "zipf_alpha": 1.05},
        {"name": "b", "num_embeddings": 500, "embedding_dim": 8, "pooling_factor": 2.0},
        {"name": "c", "num_embeddings": 2000, "embedding_dim": 32, "pooling_factor": 8.0, "zipf_alpha": 0.8},
    ],
    "topology": {"world_size": 2, "local_world_size": 2, "device": "cpu", "memory_per_rank_gb": 0.01},
    "batch_size_per_rank": 64,
    "optimizer": "sgd",
}


def tw(name: str, rank: int, rows: int, cols: int) -> dict:
    return {"name": name, "sharding_type": "table_wise", "compute_kernel": "fused",
            "shards": [{"rank": rank, "row_offset": 0, "num_rows": rows, "col_offset": 0, "num_cols": cols}]}


@pytest.fixture
def task_dict() -> dict:
    return copy.deepcopy(TASK)


@pytest.fixture
def plan_dict(task_dict: dict) -> dict:
    return {
        "format": "shardplan/plan@1",
        "task": task_dict,
        "tables": [
            tw("a", 0, 1000, 16),
            {"name": "b", "sharding_type": "row_wise", "compute_kernel": "fused", "shards": [
                {"rank": 0, "row_offset": 0, "num_rows": 250, "col_offset": 0, "num_cols": 8},
                {"rank": 1, "row_offset": 250, "num_rows": 250, "col_offset": 0, "num_cols": 8}]},
            {"name": "c", "sharding_type": "column_wise", "compute_kernel": "fused", "shards": [
                {"rank": 0, "row_offset": 0, "num_rows": 2000, "col_offset": 0, "num_cols": 16},
                {"rank": 1, "row_offset": 0, "num_rows": 2000, "col_offset": 16, "num_cols": 16}]},
        ],
    }


@pytest.fixture(scope="session")
def model_path(tmp_path_factory):
    """A small compute model trained here on real kernel timings (the tests' cost model)."""
    d = tmp_path_factory.mktemp("model")
    df = collect_compute(get_profile("cpu-2c"), POOL, d / "c.parquet", 12, repeats=2, warmup=1)
    sets = [specs_from_json(s) for s in df["shards"]]
    model = NeuralCostModel("cpu-2c", epochs=20, hidden=16, code=8).fit(
        sets, df["fwd_ms"].to_numpy(), df["bwd_ms"].to_numpy(), progress=False)
    model.save(d / "model.json", {"optimizers": ["sgd"]})
    return d / "model.json"


@pytest.fixture
def host(monkeypatch):
    """Set the CPU this process believes it runs on, its L3 (MiB) and its family and model ("family F model M";
    both unknown unless given, so that the machine the tests run on never decides which profile is this host's)."""
    def set_host(cpu: str, l3_mib: float | None = None, signature: str | None = None) -> None:
        monkeypatch.setattr(profiles, "host_cpu", lambda: cpu)
        monkeypatch.setattr(profiles, "host_chip", lambda: profiles.HostChip(l3_mib, signature))
    return set_host


@pytest.fixture
def profile_dir(monkeypatch, tmp_path):
    """A profiles folder of the test's own, whose registry starts from the committed profiles."""
    monkeypatch.setattr(profiles, "PROFILE_DIR", tmp_path)
    monkeypatch.setattr(profiles, "PROFILES", dict(profiles.PROFILES))
    monkeypatch.setattr(profiles, "BROKEN_PROFILES", {})
    return tmp_path


@pytest.fixture
def fake_spawn(monkeypatch):
    """Stand ``mp.spawn`` in with one that takes the next of ``outcomes`` per call: ``"abort"`` (a rank killed by
    SIGABRT, as the runtime's sporadic aborts are), ``"error"`` (a rank's own exception) or ``"ok"``, where
    ``on_ok(args, nprocs)`` plays the ranks' work. Returns the list of each call's ``args``."""
    import torch.multiprocessing as mp

    def install(outcomes: list[str], on_ok=None) -> list[tuple]:
        calls: list[tuple] = []

        def spawn(fn, args, nprocs, join):
            calls.append(args)
            what = outcomes.pop(0)
            if what != "ok":
                raise mp.ProcessExitedException("rank 1 died", 1, 0, -6 if what == "abort" else 1,
                                                "SIGABRT" if what == "abort" else None)
            if on_ok is not None:
                on_ok(args, nprocs)
        monkeypatch.setattr(mp, "spawn", spawn)
        return calls
    return install
