"""The pooled per-rank files of ``bench/plan_accuracy_runs.py``, read for the scripts that score issue 2's bar.

``bench/instrument_agreement.py`` and ``bench/dense_consensus.py`` both take
those files, both count ranks within :data:`TOLERANCE` of a consensus, and
both write a named report with ranks under ``--short-ms`` apart; the reading
(checked, so a wrong file is an error naming it and what it lacks, not a
pandas traceback; :func:`read_checked` for the other CSVs they take) and the
shared options live here.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from shardplan.argtypes import at_least
from shardplan.errors import InputError

TOLERANCE = 0.15  # issue 2's bar: predicted per-rank compute within 15% of measurement
POOLED_COLUMNS = ("task", "rank", "predicted_ms", "consensus_ms")


def read_checked(path: Path, option: str, columns: tuple[str, ...], fix: str, **read_csv) -> pd.DataFrame:
    """``path``'s CSV, which must hold ``columns``; else an error naming ``option`` (the argument that
    named the file), the file and what is wrong, with ``fix``."""
    if not path.is_file():
        raise InputError(option, f"{path} does not exist", fix)
    try:
        df = pd.read_csv(path, **read_csv)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise InputError(option, f"{path} is not a readable CSV ({exc})", fix) from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise InputError(option, f"{path} lacks the column(s) {', '.join(missing)}", fix)
    return df


def read_pooled(path: Path, option: str) -> pd.DataFrame:
    """A pooled file's per-rank prediction and consensus; ``option`` is the argument that named it."""
    df = read_checked(path, option, POOLED_COLUMNS, "give a per-rank CSV written by bench/plan_accuracy_runs.py")
    return df[list(POOLED_COLUMNS)]


def add_report_args(ap: argparse.ArgumentParser, short_help: str) -> None:
    """``--short-ms`` (default 10, with ``short_help`` saying what it does), ``--name`` and ``--out``."""
    ap.add_argument("--short-ms", type=at_least(0, float), default=10.0, help=f"{short_help} (default 10)")
    ap.add_argument("--name", required=True, help="results file stem suffix")
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
