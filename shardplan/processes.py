"""Child processes on loopback: a free port, and one process per rank that survives a runtime abort.

Both multi-process paths (real all-to-all timing in :mod:`.cost.comm_collect`, the
DistributedModelParallel trainer in :mod:`.execute.dmp`) start their ranks with
:func:`spawn_ranks`, so a gloo rank that dies inside the C++ runtime is handled in one place.
"""
from __future__ import annotations

import socket
from typing import Any, Callable


def free_port() -> int:
    """A loopback TCP port nothing holds now (the OS's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_ranks(worker: Callable[..., None], world: int, *args: Any) -> None:
    """Run ``worker(rank, world, port, *args)`` in ``world`` processes and wait for all of them.

    A rank that dies by SIGABRT is run once more, all ranks afresh on a new port: a gloo rank was seen
    to abort inside the C++ runtime once in a clean clone's tests on 2026-12-02 ("terminate called
    without an active exception"), just after its process group was built, and the same run passed
    at once after. A second abort, or a rank's own Python error, is raised
    (``torch.multiprocessing.ProcessRaisedException`` / ``ProcessExitedException``). The worker must
    be safe to run twice: it should write its results only at its end, to paths it overwrites.
    """
    import torch.multiprocessing as mp

    for attempt in range(2):
        try:
            mp.spawn(worker, args=(world, free_port(), *args), nprocs=world, join=True)
            return
        except mp.ProcessExitedException as e:
            if attempt or e.signal_name != "SIGABRT":
                raise
