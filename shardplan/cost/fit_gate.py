"""Hold a task's measurement to a host that stays fit through it.

:mod:`shardplan.cost.fitness` says whether the host reproduces its cost labels *now*. On a shared VM
that state comes and goes. On 2026-11-29 the ``cpu-2c-nested`` guest passed single probes between unfit
ones (blips), and a task measured after such a blip lay as far from the fit runs' consensus as an unfit
run's tasks do (docs/cost-model.md, session 67). A :class:`FitGate` holds a task to a spell instead. It
starts the task only after ``streak`` fit probes in a row. With ``after``, it probes again once the task
is measured, and where that probe finds the host unfit it drops the figures and measures the task again.
Where it finds the host fit, that probe opens the next task's row: a spell that lasts through a task needs
one probe, not ``streak``, before the next (on ``cpu-2c-nested``, half a minute of each task's three or
four; its fit spells seldom last a quarter of an hour).

    gate = FitGate(wait_s=1200, streak=2, after=True)
    rows = gate.measure(profile, task.name, lambda: measure_task(task), dropped.append)
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from ..errors import InputError, MachineUnfitError
from . import fitness
from .fitness import Fitness
from .profiles import Profile


@dataclass
class FitGate:
    """When a task may be measured, and when its figures are kept.

    ``wait_s``: before each task, how long to wait for a fit host (0: probe, record the probe and measure
    anyway). ``streak``: fit probes in a row that start a task. ``after``: probe again once the task is
    measured; a task the host was not fit through is dropped and measured again, at most ``retakes`` times.
    """

    wait_s: float = 0.0
    streak: int = 1
    after: bool = False
    retakes: int = 2
    # Fit probes in a row taken since the last measurement: the after-probe of a task kept, else none.
    _carried: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name, value, least in (("wait_s", self.wait_s, 0), ("streak", self.streak, 1),
                                   ("retakes", self.retakes, 0)):
            if not value >= least:
                raise InputError(f"FitGate.{name}", f"is {value!r}, below {least}", f"give {least} or more")

    @property
    def protocol(self) -> dict[str, object]:
        """What decides which tasks a run admits (``wait_s`` and ``retakes`` only say how long it tries):
        a run resumes only under the same."""
        return {"fit_streak": self.streak, "fit_after": self.after}

    def measure(self, profile: Profile, task: str, measure: Callable[[], list[dict]],
                drop: Callable[[dict], None]) -> list[dict]:
        """``measure()``'s rows, each with the probe taken before it (``fit_*``) and, with ``after``, the one
        taken after it (``fit_after_*``).

        A measurement the after-probe finds the host unfit through is handed to ``drop``, with both probes
        and the reference's slowdown while it was measured; ``drop`` should record it at once, so a run
        stopped while it waits keeps it. Raises :class:`MachineUnfitError` when a wait or the retakes run out.
        """
        for _ in range(self.retakes + 1):
            carried, self._carried = self._carried, 0
            before = fitness.wait_until_fit(profile, self.wait_s, streak=self.streak, carried=carried)
            rows = measure()
            later = fitness.probe(profile) if self.after else None
            self._carried = int(later is not None and later.fit)
            probes = {**(before.columns() if before else {}), **(later.columns("fit_after_") if later else {})}
            if later is None or later.fit:
                return [{**r, **probes} for r in rows]
            level = {k: rows[0][k] for k in ("reference_slowdown", "cal_reference_slowdown")
                     if rows and k in rows[0]}
            drop({"task": task, "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), **probes, **level})
            print(f"{task}: dropped, the probe after it found {later.describe()}")
        raise MachineUnfitError(f"{task}: the probe after it found the host unfit {self.retakes + 1} time(s) in a "
                                "row; run the same command again later (a bench resumes where it stopped)")

    def note(self, df: pd.DataFrame, dropped: list[dict]) -> list[str]:
        """A results file's word on the gate beyond the probe before each task (none without one)."""
        if self.streak <= 1 and not self.after:  # drops come only with an after-probe
            return []
        line = (f"Gate: each task started after {self.streak} fit probe(s) in a row" if self.streak > 1
                else "Gate: each task started after a fit probe")
        if Fitness.column_names("fit_after_")[0] in df:
            # Only tasks whose after-probe passed are kept, so what is worth saying is how fit they found the host.
            after = [Fitness.from_columns(r, "fit_after_") for r in df.groupby("task").first().itertuples()]
            ratios, refs = [f.label_ratio for f in after], [f.reference_slowdown for f in after]
            line += (f", and a probe after it found the host still fit (over the {len(after)} tasks kept, "
                     f"stored ranks re-timed at {min(ratios):.2f}-{max(ratios):.2f}x their labels, the "
                     f"reference at {min(refs):.2f}-{max(refs):.2f}x quiet)")
        line += "."
        if dropped:
            tasks = sorted({d["task"] for d in dropped})
            line += (f" {len(dropped)} measurement(s) of {len(tasks)} task(s) were dropped because the probe after "
                     f"them found the host unfit, and those tasks measured again: {', '.join(tasks)}.")
        return [line]
