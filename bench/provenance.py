"""The lines every bench results file opens with: the command that reproduces it, when it ran, on what
CPU, and how loaded the machine was before and after (on this 2-core VM the cores are the instrument);
and how a script writes its results file (:func:`write_report`).

Bench scripts import it as a sibling (``bench/`` is on ``sys.path`` when a script there runs).
"""
from __future__ import annotations

import datetime as dt
import os
import shlex
import sys
from pathlib import Path

import pandas as pd

from shardplan.cost.profiles import load1, machine_stamp
from shardplan.formats import write_text_atomic


# Environment variables that change what a kernel timing reads (how the weights' memory is laid out), written
# before the command when set: the malloc settings every collection runs under, and huge pages for torch's
# large tensors (session 89).
TIMING_ENV = ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "THP_MEM_ALLOC_ENABLE")


def provenance(load_before: float, then: str = ".") -> list[str]:
    """``Command: ...`` (after any :data:`TIMING_ENV` settings) and ``Date ... UTC, <cpu>, load X before / Y
    after`` + ``then`` (the script's own facts about the run, e.g. ``"; divisor per task 1.1-1.3x."``), as two
    markdown lines."""
    script = Path(sys.argv[0]).name
    env = "".join(f"{k}={shlex.quote(os.environ[k])} " for k in TIMING_ENV if k in os.environ)
    return [f"Command: `{env}.venv/bin/python bench/{script} {shlex.join(sys.argv[1:])}`  ",
            f"Date {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, {machine_stamp()['cpu_model']}, "
            f"load {load_before:.2f} before / {load1():.2f} after{then}"]


def write_report(out: Path, stem: str, md: list[str], table: pd.DataFrame | None = None) -> Path:
    """Write ``<out>/<stem>.md`` (and ``table``, if given, as ``<out>/<stem>.csv``), each atomically,
    print the markdown and where it went; return the markdown's path."""
    out.mkdir(parents=True, exist_ok=True)
    if table is not None:
        write_text_atomic(out / f"{stem}.csv", table.to_csv(index=False))
    path = out / f"{stem}.md"
    write_text_atomic(path, "\n".join(md))
    print("\n".join(md))
    print(f"wrote {path}" + (" and .csv" if table is not None else ""))
    return path
