"""Searchers: a task and a cost estimator in, a valid plan out.

Add one by subclassing :class:`~shardplan.search.base.Searcher` and decorating
it with :func:`~shardplan.search.base.register`.
"""
from .base import SEARCHERS, Searcher, get_searcher, register  # noqa: F401
from . import greedy, heuristics, neuroshard, rl, torchrec_adapter, tuned  # noqa: F401  (register their searchers)

DEFAULT_SEARCHER = "neuroshard"
