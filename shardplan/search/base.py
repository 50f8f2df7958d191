"""The searcher interface and registry."""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import replace
from typing import Callable, Iterable

from ..cost.estimator import PlanEstimator
from ..domain import SHARDING_TYPES, Plan, Task, TableSharding
from ..errors import InfeasibleError, InputError
from ..validate import validate_plan


def in_task_order(task: Task, tables: Iterable[TableSharding]) -> Plan:
    """A plan of ``tables`` listed in the task's table order (how plan files list them)."""
    order = {t.name: i for i, t in enumerate(task.tables)}
    return Plan(task=task, tables=tuple(sorted(tables, key=lambda s: order[s.name])))


def restricted(task: Task, sharding_types: frozenset[str] | None) -> Task:
    """``task`` with every table's allowed types cut to ``sharding_types`` (``task`` itself for None).

    A searcher's restriction is a per-table constraint on every table, so a searcher honours both through
    :meth:`Table.allows` alone; the plan is still of the task as given.
    """
    if sharding_types is None:
        return task
    tables = []
    for t in task.tables:
        both = tuple(k for k in (t.sharding_types or SHARDING_TYPES) if k in sharding_types)
        if not both:  # the two constraints leave the table no way to be placed
            raise InputError(f"{task.table_field(t.name)}.sharding_types",
                             f"{t.name!r} may only be {list(t.sharding_types or ())}, "
                             f"none of which the plan's sharding_types {sorted(sharding_types)} allow",
                             "widen one of the two")
        tables.append(replace(t, sharding_types=both))
    return replace(task, tables=tuple(tables))


class Searcher(ABC):
    """Finds a plan for a task. Subclasses implement :meth:`search`; :meth:`plan` wraps it.

    ``search`` returns the table shardings; ``plan`` times it, validates the
    result (memory included), and attaches the predicted cost and the ``search``
    block. The same task, estimator and seed give the same plan.

    ``sharding_types``, when given, are the only types the plan may use (``table_wise`` among them, so
    that every table has a way to be placed): what a trainer's backend can run, e.g. TorchRec over gloo
    has no row-wise. ``search`` sees the task with the restriction folded into each table's own
    ``sharding_types`` (:func:`restricted`), so honouring the task's per-table types honours it too.
    """

    name: str = ""
    description: str = ""

    def __init__(self, sharding_types: Iterable[str] | None = None) -> None:
        self.sharding_types = _restriction(sharding_types)

    @abstractmethod
    def search(self, task: Task, estimator: PlanEstimator, seed: int) -> list[TableSharding]: ...

    def shortlist(self, task: Task, estimator: PlanEstimator, seed: int) -> list[list[TableSharding]]:
        """The plans this searcher found, its pick first. Just :meth:`search`'s, unless a searcher keeps
        runners-up close to its pick (which measured refinement times beside it)."""
        return [self.search(task, estimator, seed)]

    def plan(self, task: Task, estimator: PlanEstimator, seed: int = 0) -> Plan:
        estimator.check_task(task)  # a task the profile has no costs for is refused before any search
        t0 = time.perf_counter()
        tables = self.search(restricted(task, self.sharding_types), estimator, seed)
        return self._finish(task, tables, estimator, seed, time.perf_counter() - t0)

    def plan_shortlist(self, task: Task, estimator: PlanEstimator, seed: int = 0) -> list[Plan]:
        """:meth:`shortlist` as finished plans (validated, predicted cost attached), the pick first;
        each plan's ``seconds`` is the whole search's."""
        estimator.check_task(task)
        t0 = time.perf_counter()
        found = self.shortlist(restricted(task, self.sharding_types), estimator, seed)
        seconds = time.perf_counter() - t0
        out: list[Plan] = []
        for tables in found:
            plan = self._finish(task, tables, estimator, seed, seconds)
            if all(plan.tables != p.tables for p in out):
                out.append(plan)
        return out

    def _finish(self, task: Task, tables: list[TableSharding], estimator: PlanEstimator, seed: int,
                seconds: float) -> Plan:
        plan = in_task_order(task, tables)
        # Every searcher honours the task's per-table types; a plan that breaks one is a searcher's bug,
        # said here by name (validate_plan would list it among other problems).
        for i, ts in enumerate(plan.tables):
            table = task.table(ts.name)
            if not table.allows(ts.sharding_type):
                raise InfeasibleError(f"tables[{i}].sharding_types", f"searcher {self.name} sharded {ts.name!r} "
                                      f"{ts.sharding_type}, which the task does not allow "
                                      f"({list(table.sharding_types or ())})",
                                      "a bug in that searcher: plan with neuroshard meanwhile")
        validate_plan(plan)
        if self.sharding_types is not None:
            bad = [f"{t.name} ({t.sharding_type})" for t in plan.tables if t.sharding_type not in self.sharding_types]
            if bad:  # a searcher bug, never a silent violation
                raise InfeasibleError("sharding_types", f"searcher {self.name} used types outside "
                                      f"{sorted(self.sharding_types)}: {', '.join(bad[:3])}")
        return Plan(task=task, tables=plan.tables, cost=estimator.estimate(plan),
                    search={"searcher": self.name, "seed": seed, "seconds": round(seconds, 4)})


SEARCHERS: dict[str, Callable[[], Searcher]] = {}


def register(cls: type[Searcher]) -> type[Searcher]:
    SEARCHERS[cls.name] = cls
    return cls


def _restriction(sharding_types: Iterable[str] | None) -> frozenset[str] | None:
    if sharding_types is None:
        return None
    if isinstance(sharding_types, str):  # a bare "table_wise" would read as its letters
        raise InputError("sharding_types", f"must be a list of types, got the string {sharding_types!r}",
                         f"pass a list, e.g. [{sharding_types!r}]")
    allowed = frozenset(sharding_types)
    unknown = sorted(allowed - set(SHARDING_TYPES))
    if unknown or "table_wise" not in allowed:
        raise InputError("sharding_types", f"{sorted(allowed)} is not a usable restriction"
                         + (f" ({unknown} unknown)" if unknown else " (table_wise is required)"),
                         f"choose from {list(SHARDING_TYPES)}, including table_wise")
    return allowed


def get_searcher(name: str, sharding_types: Iterable[str] | None = None) -> Searcher:
    """A searcher by name; ``sharding_types`` restricts the plan to those types (``table_wise`` required)."""
    try:
        cls = SEARCHERS[name]
    except KeyError:
        raise InputError("searcher", f"unknown searcher {name!r}", f"use one of {sorted(SEARCHERS)}") from None
    return cls(sharding_types=sharding_types)
