"""The committed index of ``bench/results/`` lists every results file there, each under the script that wrote it."""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _index_module():
    spec = importlib.util.spec_from_file_location("bench_index", ROOT / "bench" / "index.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_committed_index_lists_every_result() -> None:
    index = _index_module()
    committed = index.INDEX.read_text()
    listed = set(re.findall(r"^\| `([^`]+)` \|", committed, flags=re.M))
    on_disk = {r.name for r in index.collect()}
    assert on_disk - listed == set(), "results missing from bench/results/README.md: run .venv/bin/python bench/index.py"
    assert listed - on_disk == set(), "the index lists results that are gone: run .venv/bin/python bench/index.py"


def test_every_result_is_traced_to_its_script() -> None:
    index = _index_module()
    results = index.collect()
    scripts = {r.script for r in results}
    assert "(unknown)" not in scripts
    for script in scripts - {index.BENCH_CLI, index.SHARDPLAN_CLI}:
        # a script reverted with its experiment keeps its results, and the index says where it went
        assert (ROOT / script).exists() or "removed" in index._purpose(script), script
    # a bench run's own file names its command, and the index finds it
    s22 = next(r for r in results if r.name == "bench-cpu-2c-cpu-bench-s22")
    assert s22.script == index.BENCH_CLI and "--suite data/tasks/cpu-bench" in s22.command
    assert s22.date.startswith("2026-11-23")
    assert any("README.md" in r.cited_in for r in results) and any(not r.cited_in for r in results)
