"""Bad input ends a program the same way everywhere: ``error: ...`` on stderr and exit 2 (3 for a
machine too disturbed to measure on), from the CLI and from the scripts under ``bench/`` alike."""
from __future__ import annotations

import subprocess
import sys

import pytest

from shardplan.errors import InputError, MachineUnfitError, exit_status

from conftest import ROOT


def test_exit_status_maps_errors_to_codes(capsys: pytest.CaptureFixture[str]) -> None:
    def bad() -> None:
        raise InputError("--rank", "must be in 0..3, got 9", "give a rank the plan has")

    def unfit() -> None:
        raise MachineUnfitError("the machine stayed 2.4x slow")

    assert exit_status(bad) == 2
    assert capsys.readouterr().err == "error: --rank: must be in 0..3, got 9 (give a rank the plan has)\n"
    assert exit_status(unfit) == 3
    assert "2.4x slow" in capsys.readouterr().err
    assert exit_status(lambda: None) == 0
    assert exit_status(lambda: 5) == 5
    with pytest.raises(ZeroDivisionError):  # a bug is not bad input: it keeps its traceback
        exit_status(lambda: 1 // 0)


def test_a_bench_script_answers_bad_input_with_exit_2() -> None:
    done = subprocess.run([sys.executable, "bench/ratio_law.py", "no-such-bench.csv"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "error: runs: no such bench CSV: no-such-bench.csv" in done.stderr
    assert "Traceback" not in done.stderr


def test_every_bench_script_ends_through_exit_status() -> None:
    # index.py is the one exception: it reads only files it wrote itself and stays free of the package
    scripts = [p for p in sorted((ROOT / "bench").glob("*.py"))
               if '__name__ == "__main__"' in p.read_text() and p.name != "index.py"]
    assert len(scripts) > 30
    missing = [p.name for p in scripts if "sys.exit(exit_status(main))" not in p.read_text()]
    assert missing == []


def test_numeric_flags_are_range_checked_at_the_door() -> None:
    # a count or seed taken as a bare int ran with 0 or -1 (train-policy --updates 0 saved an untrained policy
    # over the committed one); every numeric flag goes through shardplan.argtypes.at_least instead, but those
    # whose value a library call checks itself (listed)
    import re

    checked_elsewhere = {"--host-reference-ms", "--epochs", "--iterations", "--warmup", "--rounds", "--visits",
                         "--min-shards", "--max-shards", "--min-table-rows", "--min-pooling", "--min-zipf",
                         "--min-cols",
                         "--row-share", "--replica-share", "--replica-max-rows", "--workers", "--max-tables",
                         "--max-world-size", "--max-body-bytes", "--max-budget-s"}
    bare = []
    for path in [ROOT / "shardplan" / "cli.py", *sorted((ROOT / "bench").glob("*.py"))]:
        for flag in re.findall(r'add_argument\("(--[a-z-]+)", type=(?:int|float)\b', path.read_text()):
            if flag not in checked_elsewhere:
                bare.append(f"{path.name} {flag}")
    assert bare == []
