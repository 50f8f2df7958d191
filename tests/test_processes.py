"""One process per rank: a runtime abort is run once more on a fresh port; anything else is raised."""
from __future__ import annotations

import pytest
import torch.multiprocessing as mp

from shardplan.processes import free_port, spawn_ranks


@pytest.mark.parametrize("outcomes,raised,expected_calls", [(["ok"], False, 1), (["abort", "ok"], False, 2),
                                                            (["abort", "abort", "ok"], True, 2),
                                                            (["error", "ok"], True, 1)])
def test_an_abort_is_run_once_more_and_a_second_abort_or_an_error_raised(fake_spawn, outcomes, raised,
                                                                          expected_calls) -> None:
    calls = fake_spawn(outcomes)
    if raised:
        with pytest.raises(mp.ProcessExitedException):
            spawn_ranks(print, 3, "a", "b")
    else:
        spawn_ranks(print, 3, "a", "b")
    assert len(calls) == expected_calls
    # every attempt hands the worker (world, port, *args), the port a real free one
    assert all(c[0] == 3 and isinstance(c[1], int) and 0 < c[1] < 65536 and c[2:] == ("a", "b") for c in calls)


def test_a_free_port_can_be_bound() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", free_port()))
