"""shardplan.cost.fit_gate: a task is kept only when the host was fit before it and, if asked, after it."""
from __future__ import annotations

import pandas as pd
import pytest

from shardplan.cost import fit_gate
from shardplan.cost.fit_gate import FitGate
from shardplan.cost.fitness import Fitness
from shardplan.errors import InputError, MachineUnfitError

FIT, UNFIT = Fitness(1.02, 1.3, 0.98), Fitness(0.7, 2.5, 0.84)


def _host(monkeypatch, before, afters) -> list[tuple]:
    """Probes as scripted: ``before`` for every wait, ``afters`` in turn for the probes after a task."""
    waits: list[tuple] = []

    def wait_until_fit(profile, max_wait_s, streak=1, carried=0):
        waits.append((max_wait_s, streak, carried))
        return before

    afters = iter(afters)
    monkeypatch.setattr(fit_gate.fitness, "wait_until_fit", wait_until_fit)
    monkeypatch.setattr(fit_gate.fitness, "probe", lambda profile: next(afters))
    return waits


def test_a_task_the_host_was_not_fit_through_is_dropped_and_measured_again(monkeypatch) -> None:
    waits = _host(monkeypatch, FIT, [UNFIT, FIT])  # the host left the fit state during the first measurement
    measured = []

    def measure() -> list[dict]:
        measured.append(len(measured))
        return [{"task": "t", "rank": 0, "cal_fwd_ms": 1.0 + len(measured), "cal_reference_slowdown": 2.2}]

    dropped: list[dict] = []
    gate = FitGate(wait_s=600, streak=2, after=True, retakes=2)
    rows = gate.measure(None, "t", measure, dropped.append)
    assert waits == [(600, 2, 0), (600, 2, 0)]  # every measurement, the retake too, waits for a spell
    assert measured == [0, 1] and rows[0]["cal_fwd_ms"] == 3.0  # the second measurement's figures
    assert rows[0]["fit_label_ratio"] == 1.02 and rows[0]["fit_after_reference"] == 1.3
    assert len(dropped) == 1 and dropped[0]["task"] == "t" and dropped[0]["fit_after_label_ratio"] == 0.7
    assert dropped[0]["cal_reference_slowdown"] == 2.2  # how slow the reference ran while it was calibrated
    note = gate.note(pd.DataFrame(rows), dropped)[0]
    assert note.startswith("Gate: each task started after 2 fit probe(s) in a row, and a probe after it found "
                           "the host still fit (over the 1 tasks kept, stored ranks re-timed at 1.02-1.02x their "
                           "labels, the reference at 1.30-1.30x quiet)")
    assert note.endswith("1 measurement(s) of 1 task(s) were dropped because the probe after them found the host "
                         "unfit, and those tasks measured again: t.")

    _host(monkeypatch, FIT, [UNFIT, UNFIT])
    with pytest.raises(MachineUnfitError, match="t: the probe after it found the host unfit 2 time"):
        FitGate(after=True, retakes=1).measure(None, "t", measure, dropped.append)
    assert len(dropped) == 3  # each drop is handed over at once, the run's last included


def test_without_an_after_probe_the_task_is_kept_with_the_probe_before_it(monkeypatch) -> None:
    _host(monkeypatch, None, [])  # a profile with no stored ranks to probe: nothing recorded, nothing waited on
    rows = FitGate().measure(None, "t", lambda: [{"task": "t", "rank": 0}], lambda d: pytest.fail("dropped"))
    assert rows == [{"task": "t", "rank": 0}]
    assert FitGate().note(pd.DataFrame(rows), []) == []  # the default gate adds nothing to a results file
    _host(monkeypatch, UNFIT, [])
    rows = FitGate().measure(None, "t", lambda: [{"task": "t", "rank": 0}], lambda d: pytest.fail("dropped"))
    assert rows[0]["fit_label_ratio"] == 0.7  # wait_s 0 measures anyway and records what the probe found


def test_a_task_kept_opens_the_next_tasks_row_of_fit_probes_and_a_drop_does_not(monkeypatch) -> None:
    waits = _host(monkeypatch, FIT, [FIT, UNFIT, FIT, FIT])
    gate, kept = FitGate(wait_s=600, streak=2, after=True), []
    for task in ("a", "b", "c"):
        kept += gate.measure(None, task, lambda: [{"task": task}], lambda d: None)
    # a: nothing before it; b: a's after-probe; b's retake: nothing (its first take was dropped); c: b's.
    assert [w[2] for w in waits] == [0, 1, 0, 1]
    assert [r["task"] for r in kept] == ["a", "b", "c"]


@pytest.mark.parametrize("field, value", [("wait_s", -1.0), ("streak", 0), ("retakes", -1)])
def test_a_gate_below_its_range_is_refused_by_field(field, value) -> None:
    with pytest.raises(InputError, match=f"FitGate.{field}"):
        FitGate(**{field: value})
