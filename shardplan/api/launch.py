"""Start the planning service in a child process (for tests, benchmarks and scripts)."""
from __future__ import annotations

import subprocess
import sys
import time
from contextlib import contextmanager
from typing import Iterator

import httpx

from ..processes import free_port


@contextmanager
def running_service(*flags: str, startup_s: float = 60.0) -> Iterator[str]:
    """``shardplan serve FLAGS`` on a free loopback port; yields its base URL once ``/healthz`` answers."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "shardplan.cli", "serve", "--port", str(port),
                             "--log-level", "warning", *flags])
    try:
        deadline = time.monotonic() + startup_s
        while True:
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the service did not start (exit code {proc.poll()})")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
