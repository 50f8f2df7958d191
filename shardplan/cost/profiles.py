"""Hardware profiles: a named machine kind that owns its cost data and models.

Costs learned on one profile are never used for another (DESIGN.md); every
model file records its profile and loading it for another one is an error.
"""
from __future__ import annotations

import json
import os
import platform
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError

DATA_DIR = Path(__file__).resolve().parents[2] / "data"
PROFILE_DIR = DATA_DIR / "profiles"


@dataclass(frozen=True)
class Profile:
    """How a machine kind is measured.

    ``threads``: intra-op threads one rank gets (on cpu-2c a rank is one
    single-threaded process, so two can run side by side on the two cores).
    ``max_rows``: the largest table (rows) the profile's cost data covers;
    ``collect_batch_sizes``: the global batch sizes the collector draws from.
    ``cpu_model``: the host CPU its cost data was taken on, as ``/proc/cpuinfo`` names it
    (:func:`machine_stamp`). CPU kernel costs do not carry from one CPU to another: the same
    5,500 shard sets ran 0.63-1.21x as long on the Intel host as on the AMD one (10th-90th
    percentile, ``bench/profile_pair.py``), so measuring on another CPU is flagged.
    ``warmup`` / ``repeats``: the timing protocol (iterations discarded, then
    timed; the median is kept) shared by the collector and plan measurement, so
    the model learns from exactly the instrument that later checks it.
    """

    name: str
    device: str
    threads: int
    max_rows: int
    collect_batch_sizes: tuple[int, ...]
    max_sample_weight_bytes: int
    max_sample_lookup_floats: float
    description: str
    cpu_model: str = ""
    warmup: int = 3
    repeats: int = 10

    @property
    def dir(self) -> Path:
        return PROFILE_DIR / self.name

    def use_threads(self) -> None:
        """Give this process the intra-op threads one rank gets on this profile (CPU profiles)."""
        if self.device == "cpu" and self.threads:
            import torch

            torch.set_num_threads(self.threads)


def _two_core_vm(name: str, cpu_model: str, machine: str) -> Profile:
    """A 2-core CPU VM measured as ``cpu-2c`` is: one single-threaded process per rank, the same
    sample budgets, so that two such profiles time the very same random sets."""
    return Profile(name=name, device="cpu", threads=1, max_rows=1_000_000,
                   collect_batch_sizes=(512, 1024, 2048, 4096, 8192),
                   max_sample_weight_bytes=600 * 2**20, max_sample_lookup_floats=3.0e7,
                   description=f"{machine}, FBGEMM CPU kernels, one single-threaded process per rank",
                   cpu_model=cpu_model)


# A lent GPU is the process's alone and CUDA events time it to the microsecond, so its samples are timed
# over fewer calls than the shared CPU VM's (2 warm-up, median of 5): the 15 minutes of GPU a session
# gets then hold twice the samples.
GPU_PROTOCOL = {"warmup": 2, "repeats": 5}

PROFILES: dict[str, Profile] = {
    "cpu-2c": _two_core_vm("cpu-2c", "AMD EPYC", "2-core AMD EPYC VM (32 MiB L3)"),
    "cpu-2c-xeon": _two_core_vm("cpu-2c-xeon", "Intel(R) Xeon(R) Processor", "2-core Intel Xeon VM (480 MiB L3)"),
    "h100": Profile(
        name="h100", device="cuda", threads=0, max_rows=50_000_000,
        collect_batch_sizes=(16384, 32768, 65536, 131072),
        max_sample_weight_bytes=40 * 2**30, max_sample_lookup_floats=2.0e10,
        description="one NVIDIA H100 80GB, FBGEMM CUDA kernels", **GPU_PROTOCOL),
    "h200": Profile(
        name="h200", device="cuda", threads=0, max_rows=50_000_000,
        collect_batch_sizes=(16384, 32768, 65536, 131072),
        max_sample_weight_bytes=80 * 2**30, max_sample_lookup_floats=2.0e10,
        description="one NVIDIA H200 141GB, FBGEMM CUDA kernels", **GPU_PROTOCOL),
}
DEFAULT_PROFILE = "cpu-2c"


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise InputError("profile", f"unknown hardware profile {name!r}",
                         f"use one of {sorted(PROFILES)}") from None


def machine_stamp() -> dict[str, object]:
    """What every cost-data row records about the machine that produced it."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu_model": cpu, "cpu_cores": os.cpu_count() or 0, "hostname": platform.node()}


def host_cpu() -> str:
    """This host's CPU as cost-data rows record it (``/proc/cpuinfo``'s model name)."""
    return str(machine_stamp()["cpu_model"])


def runs_here(profile: Profile) -> bool:
    """Whether this host is the CPU ``profile`` was measured on (GPU profiles name their device
    instead, and a profile without a recorded CPU matches any host)."""
    return profile.device != "cpu" or not profile.cpu_model or host_cpu().startswith(profile.cpu_model)


def measured_on_this_cpu(profile: Profile) -> bool:
    """Whether ``profile`` is a CPU profile whose recorded CPU is this host's (stricter than
    :func:`runs_here`, which also passes GPU profiles and profiles that record no CPU)."""
    return profile.device == "cpu" and bool(profile.cpu_model) and runs_here(profile)


def host_profile() -> Profile | None:
    """The CPU profile measured on this host's CPU that has a trained compute model, if any."""
    for p in PROFILES.values():
        if measured_on_this_cpu(p) and (p.dir / "compute-model.json").exists():
            return p
    return None


def local_profile() -> str:
    """The profile to measure this host with: its own (:func:`host_profile`), else the default."""
    p = host_profile()
    return p.name if p else DEFAULT_PROFILE


def foreign_host_note(profile: Profile) -> str | None:
    """Why ``profile``'s costs do not describe this host, with the fix; ``None`` when they do."""
    if runs_here(profile):
        return None
    own = host_profile()
    fix = (f"measure with --profile {own.name}" if own else
           "collect a profile for this CPU (docs/cost-model.md, \"Another CPU, another profile\")")
    return (f"this host's CPU is {host_cpu()!r} but profile {profile.name!r} was measured on "
            f"{profile.cpu_model!r}: its predictions and quiet reference do not hold here; {fix}")


def host_record(profile: Profile) -> dict[str, str]:
    """The host a measurement runs on, for its cost block; on a CPU other than ``profile``'s, also
    why its figures do not compare with the profile's predictions (and a warning now)."""
    note = foreign_host_note(profile)
    if note:
        warnings.warn(note, stacklevel=3)
    return {"host_cpu": host_cpu(), **({"foreign_host": note} if note else {})}


def check_collect_target(profile: Profile, out: Path) -> None:
    """Refuse to write this host's timings into another CPU's committed cost data."""
    note = foreign_host_note(profile)
    if note and profile.dir.resolve() in Path(out).resolve().parents:
        raise InputError("profile", note, f"or write elsewhere with --out (not under {profile.dir})")


def load1() -> float:
    """The 1-minute load average (the machine is the instrument; it is recorded with the data)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def available_memory_gb() -> float | None:
    """Memory the kernel says can be allocated without swapping (``MemAvailable``); ``None`` off Linux."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def reference_ms(profile: Profile) -> float | None:
    """The profile's quiet-machine reference time, if ``shardplan train`` has written it."""
    path = profile.dir / "reference.json"
    return float(json.loads(path.read_text())["reference_ms"]) if path.exists() else None
