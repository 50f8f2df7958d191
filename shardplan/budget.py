"""A per-thread planning time budget that searches honour cooperatively.

Python threads cannot be killed, so a search that runs past its budget is
stopped from inside: :meth:`PlanEstimator.rank_compute` (which every
model-driven search calls again and again) calls :func:`check`, and that raises
:class:`BudgetExceeded` once the thread's deadline has passed. The REST service
wraps each planning request in :func:`time_budget`; elsewhere no deadline is set
and :func:`check` costs one attribute lookup.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

from .errors import InputError

_local = threading.local()


class BudgetExceeded(InputError):
    """Planning did not finish within its time budget."""


@contextmanager
def time_budget(seconds: float) -> Iterator[None]:
    """Searches on this thread raise :class:`BudgetExceeded` after ``seconds``."""
    previous = getattr(_local, "deadline", None)
    _local.deadline = time.monotonic() + seconds
    _local.seconds = seconds
    try:
        yield
    finally:
        _local.deadline = previous


def check() -> None:
    deadline = getattr(_local, "deadline", None)
    if deadline is not None and time.monotonic() > deadline:
        raise BudgetExceeded("budget_s", f"planning did not finish within {_local.seconds:g} s",
                             "raise budget_s, or use a faster searcher such as neuroshard-tw or greedy-cost")
