"""The command-line arguments shared by the scripts that measure plans interleaved on real kernels
(``model_ab.py``, ``plans_ab.py``, ``refine_effect.py``): profile, suite, rounds x visits per call, and
where the results go. A sibling module: ``bench/`` is on ``sys.path`` when a script there runs."""
from __future__ import annotations

import argparse
from pathlib import Path

from shardplan.argtypes import at_least


def add_interleaved_arguments(ap: argparse.ArgumentParser) -> None:
    """``--profile``, ``--suite``, ``--rounds``, ``--visits`` (the plans' ranks take turns visit by visit:
    2 x 4 as in the bench's comparisons), ``--name`` (required) and ``--out``."""
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--suite", type=Path, default=Path("data/tasks/cpu-bench"))
    ap.add_argument("--rounds", type=at_least(1), default=2)
    ap.add_argument("--visits", type=at_least(1), default=4)
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
