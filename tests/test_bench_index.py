"""The committed index of ``bench/results/`` lists every results file there, each under the script that wrote it."""
from __future__ import annotations

import re

from conftest import ROOT


def test_committed_index_lists_every_result(load_script) -> None:
    index = load_script("bench/index.py")
    committed = index.INDEX.read_text()
    listed = set(re.findall(r"^\| `([^`]+)` \|", committed, flags=re.M))
    on_disk = {r.name for r in index.collect()}
    assert on_disk - listed == set(), ("results missing from bench/results/README.md: "
                                       "run .venv/bin/python bench/index.py")
    assert listed - on_disk == set(), "the index lists results that are gone: run .venv/bin/python bench/index.py"


def test_every_result_is_traced_to_its_script(load_script) -> None:
    index = load_script("bench/index.py")
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


def test_a_command_run_under_timing_settings_names_them_and_is_still_traced(load_script, monkeypatch) -> None:
    provenance = load_script("bench/provenance.py")
    index = load_script("bench/index.py")
    monkeypatch.setattr("sys.argv", ["bench/rank_parts.py", "--rank", "0"])
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "1")
    monkeypatch.setenv("MALLOC_MMAP_MAX_", "0")
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    line = provenance.provenance(0.5)[0]
    assert line == ("Command: `MALLOC_MMAP_MAX_=0 THP_MEM_ALLOC_ENABLE=1 .venv/bin/python bench/rank_parts.py "
                    "--rank 0`  ")
    command = index._COMMAND.search(line).group(1)
    assert index.Result(name="x", command=command).script == "bench/rank_parts.py"
