"""The searcher interface and registry."""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import Callable

from ..cost.estimator import PlanEstimator
from ..domain import Plan, Task, TableSharding
from ..errors import InputError
from ..validate import validate_plan


class Searcher(ABC):
    """Finds a plan for a task. Subclasses implement :meth:`search`; :meth:`plan` wraps it.

    ``search`` returns the table shardings; ``plan`` times it, validates the
    result (memory included), and attaches the predicted cost and the ``search``
    block. The same task, estimator and seed give the same plan.
    """

    name: str = ""
    description: str = ""

    @abstractmethod
    def search(self, task: Task, estimator: PlanEstimator, seed: int) -> list[TableSharding]: ...

    def plan(self, task: Task, estimator: PlanEstimator, seed: int = 0) -> Plan:
        t0 = time.perf_counter()
        tables = self.search(task, estimator, seed)
        seconds = time.perf_counter() - t0
        order = {t.name: i for i, t in enumerate(task.tables)}
        plan = Plan(task=task, tables=tuple(sorted(tables, key=lambda s: order[s.name])))
        validate_plan(plan)
        return Plan(task=task, tables=plan.tables, cost=estimator.estimate(plan),
                    search={"searcher": self.name, "seed": seed, "seconds": round(seconds, 4)})


SEARCHERS: dict[str, Callable[[], Searcher]] = {}


def register(cls: type[Searcher]) -> type[Searcher]:
    SEARCHERS[cls.name] = cls
    return cls


def get_searcher(name: str) -> Searcher:
    try:
        return SEARCHERS[name]()
    except KeyError:
        raise InputError("searcher", f"unknown searcher {name!r}", f"use one of {sorted(SEARCHERS)}") from None
