"""Errors that shardplan raises for bad input.

Every input problem is a :class:`InputError` that names the offending field
(a JSON-pointer-like path such as ``tables[3].embedding_dim``) and says how to
fix it. The CLI and the bench scripts turn it into exit code 2 (:func:`exit_status`), the REST
API into HTTP 422.
"""
from __future__ import annotations

import sys
from collections.abc import Callable


class InputError(ValueError):
    """A task, plan, model file or argument that cannot be used as given."""

    def __init__(self, field: str, problem: str, fix: str = "") -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        msg = f"{field}: {problem}" if field else problem
        if fix:
            msg += f" ({fix})"
        super().__init__(msg)


class InfeasibleError(InputError):
    """No plan can satisfy the task's constraints (memory, ranks)."""


class MachineUnfitError(RuntimeError):
    """The machine stayed too disturbed to measure on (``shardplan.cost.fitness``).

    Not bad input: the same command can succeed later. The CLI exits 3.
    """


def exit_status(command: Callable[[], int | None]) -> int:
    """Run ``command`` as a program's body and give its exit status: bad input (:class:`InputError`)
    prints ``error: <field>: <problem> (<fix>)`` to stderr and gives 2, a machine too disturbed to
    measure on (:class:`MachineUnfitError`) 3, and otherwise the command's own status (0 for ``None``).

    One place for the rule, so the CLI and the scripts under ``bench/`` answer bad input alike.
    """
    try:
        return command() or 0
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except MachineUnfitError as e:  # not bad input: the same command can succeed later
        print(f"error: {e}", file=sys.stderr)
        return 3
