"""Hardware profiles: a named machine kind that owns its cost data and models.

Costs learned on one profile are never used for another (DESIGN.md); every
model file records its profile and loading it for another one is an error.
"""
from __future__ import annotations

import json
import os
import platform
import re
import warnings
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from ..domain import Plan
from ..errors import InputError
from ..formats import parse_model, read_json, write_text_atomic
from ..schema import NonNegFloat, NonNegInt, PosFloat, PosInt

DATA_DIR = Path(__file__).resolve().parents[2] / "data"
PROFILE_DIR = DATA_DIR / "profiles"
PROFILE_NAME = r"[a-z0-9][a-z0-9._-]{0,63}"
PROFILE_FORMAT = "shardplan/profile@1"
CPU_SIGNATURE = r"family \d+ model \d+"  # Profile.cpu_signature, as host_cpu_signature() writes it
PROFILE_FILE = "profile.json"  # in the profile's folder, beside the cost data and models it owns
# The profile every command, the Python API and the REST service use unless told another: cpu-2c, or the
# one a user names once for a machine of their own (`export SHARDPLAN_PROFILE=my-a100`) rather than per call.
PROFILE_ENV = "SHARDPLAN_PROFILE"
DEFAULT_PROFILE = os.environ.get(PROFILE_ENV) or "cpu-2c"


@dataclass(frozen=True)
class PublishedFigures:
    """A GPU machine's published figures, for what one lent GPU cannot measure: the HBM bandwidth the
    roofline prices an untrained profile with (:meth:`.baselines.RooflineCostModel.published`), and the
    links the alpha-beta comm model prices all-to-alls with (:class:`.comm.AlphaBetaCommModel`), each per
    GPU and per direction, with the documents they come from. Modelled, never measured here."""

    hbm_bytes_per_s: float
    hbm_source: str
    nvlink_gbps: float  # inside a host
    network_gbps: float  # across hosts
    alpha_intra_us: float
    alpha_inter_us: float
    comm_source: str


@dataclass(frozen=True)
class Profile:
    """How a machine kind is measured; read from ``data/profiles/<name>/profile.json``.

    ``threads``: intra-op threads one rank gets (on cpu-2c a rank is one
    single-threaded process, so two can run side by side on the two cores; 0 on a GPU).
    ``max_rows``: the largest table (rows) the profile's cost data covers;
    ``collect_batch_sizes``: the global batch sizes the collector draws from;
    ``max_sample_weight_bytes`` / ``max_sample_lookup_floats``: the budgets a random set's
    weights and lookups a batch stay within, so each sample fits the device and times in about a second.
    ``cpu_model``: the host CPU its cost data was taken on, as ``/proc/cpuinfo`` names it
    (:func:`machine_stamp`). CPU kernel costs do not carry from one CPU to another: the same
    5,500 shard sets ran 0.63-1.21x as long on the Intel host as on the AMD one (10th-90th
    percentile, ``bench/profile_pair.py``), so measuring on another CPU is flagged.
    ``l3_mib``: the last-level cache the labels' host reported (MiB, as Linux's sysfs gives it; unset where
    it was not recorded). A CPU name does not tell two hosts apart: a guest of 2026-12-01 named its CPU as
    ``cpu-2c-xeon``'s host did with a quarter of its L3 (105 of 480 MiB), and a set that touches tens of MB a
    batch leaves the cache's curve at another size there (:func:`chip_note`).
    ``cpu_signature``: the labels' host's CPU family and model (``/proc/cpuinfo``, "family F model M"; unset
    where not recorded). Neither name nor L3 tells every pair apart: the guest of 2026-12-06 named its CPU
    ``AMD EPYC`` with 32 MiB of L3, as ``cpu-2c-nested``'s did, but was a Zen 4 (family 25 model 17, AVX-512)
    where that one was a Zen 3 (model 1, no AVX-512), and FBGEMM's CPU kernels are generated per instruction set.
    ``warmup`` / ``repeats``: the timing protocol (iterations discarded, then
    timed; the median is kept) shared by the collector and plan measurement, so
    the model learns from exactly the instrument that later checks it. A lent GPU is the
    process's alone and CUDA events time it to the microsecond, so the GPU profiles time
    over fewer calls (2 warm-up, median of 5): a short lease then holds twice the samples.
    ``retry_pause_s``: the collector's pause before a retry, times the attempt number.
    ``slowdown_window_s``: how a CPU timing's label is divided (:mod:`.labels`): unset, by the slowdown its
    own reference timings show; set, by the median slowdown of the timings within half that many seconds.
    ``train_decompositions``: whether ``shardplan train`` learns ``compute-decompositions.parquet``'s ratios
    by default (the profile's recipe; ``--decompositions`` / ``--no-decompositions`` override it), so the
    bare command reproduces the committed model.
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
    l3_mib: float | None = None
    cpu_signature: str | None = None
    warmup: int = 3
    repeats: int = 10
    retry_pause_s: float | None = None  # None: kernel.RETRY_PAUSE_S
    slowdown_window_s: float | None = None  # None: each label over its own references (labels.py)
    train_decompositions: bool = False
    published: PublishedFigures | None = None  # GPU profiles (required there); a CPU's comm is measured

    @property
    def dir(self) -> Path:
        return PROFILE_DIR / self.name

    @property
    def chip(self) -> "HostChip":
        """The chip of the host its labels were taken on, as recorded (:class:`HostChip`)."""
        return HostChip(self.l3_mib, self.cpu_signature)

    def use_threads(self) -> None:
        """Give this process the intra-op threads one rank gets on this profile (CPU profiles)."""
        if self.device == "cpu" and self.threads:
            import torch

            torch.set_num_threads(self.threads)

    def to_json(self) -> dict[str, object]:
        """The ``shardplan/profile@1`` document of this profile."""
        doc = {"format": PROFILE_FORMAT, **asdict(self), "collect_batch_sizes": list(self.collect_batch_sizes)}
        for optional in ("published", "retry_pause_s", "slowdown_window_s", "l3_mib", "cpu_signature"):
            if doc[optional] is None:
                del doc[optional]
        if not self.train_decompositions:  # the default recipe is left unwritten, as the fields above
            del doc["train_decompositions"]
        return doc

    @classmethod
    def from_json(cls, data: object) -> "Profile":
        """A profile from its ``shardplan/profile@1`` document; a bad field is an :class:`InputError`."""
        m = parse_model(_ProfileModel, data, "profile", "shardplan/cost/profiles.py")
        fields = m.model_dump(exclude={"format"})
        published = PublishedFigures(**fields.pop("published")) if m.published else None
        return cls(**{**fields, "collect_batch_sizes": tuple(m.collect_batch_sizes), "published": published})


class _PublishedModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hbm_bytes_per_s: PosFloat
    hbm_source: Annotated[str, Field(min_length=1)]
    nvlink_gbps: PosFloat
    network_gbps: PosFloat
    alpha_intra_us: NonNegFloat
    alpha_inter_us: NonNegFloat
    comm_source: Annotated[str, Field(min_length=1)]


class _ProfileModel(BaseModel):
    """The schema of ``profile.json``: every field of :class:`Profile`, nothing else (a misspelt field
    would otherwise fall back to a default and time with another protocol than the one written)."""

    model_config = ConfigDict(extra="forbid")
    format: Literal["shardplan/profile@1"]
    name: Annotated[str, Field(pattern=f"^{PROFILE_NAME}$")]  # pydantic searches a pattern: anchor it
    device: Literal["cpu", "cuda"]
    threads: NonNegInt
    max_rows: PosInt
    collect_batch_sizes: Annotated[list[PosInt], Field(min_length=1)]
    max_sample_weight_bytes: PosInt
    max_sample_lookup_floats: PosFloat
    description: Annotated[str, Field(min_length=1)]
    cpu_model: str = ""
    l3_mib: PosFloat | None = None
    cpu_signature: Annotated[str, Field(pattern=f"^{CPU_SIGNATURE}$")] | None = None
    warmup: NonNegInt = 3
    repeats: PosInt = 10
    retry_pause_s: NonNegFloat | None = None
    slowdown_window_s: PosFloat | None = None
    train_decompositions: StrictBool = False
    published: _PublishedModel | None = None

    @model_validator(mode="after")
    def _published_for_gpus_only(self) -> "_ProfileModel":
        if self.device == "cuda" and self.published is None:
            raise ValueError("a GPU profile needs its published figures (HBM bandwidth, links), which price it "
                             "before it is trained and price its comm always; copy h100's and edit them")
        if self.device == "cpu" and self.published is not None:
            raise ValueError("a CPU profile's comm is measured (shardplan collect comm); remove 'published'")
        return self


def load_profile_file(path: Path) -> Profile:
    """The profile in ``path`` (a ``profile.json``), checked: its name must be its folder's."""
    try:
        profile = Profile.from_json(read_json(path))
    except InputError as e:
        raise InputError(f"{path}: {e.field}" if e.field else str(path), e.problem,
                         e.fix or "fix the file, or remove its folder") from None
    if profile.name != path.parent.name:
        raise InputError(f"{path}: name", f"is {profile.name!r} but the file is in folder {path.parent.name!r}",
                         "a profile's name is its folder's; rename one of them")
    return profile


def load_profiles(root: Path) -> tuple[dict[str, Profile], dict[str, str]]:
    """Every profile under ``root`` (each folder with a ``profile.json``), by name, and apart from them
    each folder whose file cannot be used, with why: one broken file must not take the others down."""
    found: dict[str, Profile] = {}
    broken: dict[str, str] = {}
    for path in sorted(root.glob(f"*/{PROFILE_FILE}")):
        try:
            found[path.parent.name] = load_profile_file(path)
        except InputError as e:
            broken[path.parent.name] = str(e)
    return found, broken


# The registry, read once at import: the committed profiles and any a user added
# (`shardplan profiles --new`, :func:`new_profile`, which also registers it here).
PROFILES, BROKEN_PROFILES = load_profiles(PROFILE_DIR)


def get_profile(name: str) -> Profile:
    if name in PROFILES:
        return PROFILES[name]
    field = PROFILE_ENV if name == os.environ.get(PROFILE_ENV) else "profile"  # where the name came from
    if name in BROKEN_PROFILES:
        raise InputError(field, BROKEN_PROFILES[name])
    raise InputError(field, f"unknown hardware profile {name!r}",
                     f"use one of {sorted(PROFILES)}, or add one: shardplan profiles --new {name} --like <profile>")


def profiles_of_device(device: str) -> list[str]:
    """The profiles that price ranks of ``device`` ("cpu" or "cuda")."""
    return [name for name, p in PROFILES.items() if p.device == device]


def profile_for(plan: Plan, given: str | None = None) -> str:
    """The profile to price ``plan`` with: ``given``, else the one that priced it (its cost block), else
    the default profile where it prices the plan's device (``cpu-2c`` for CPU ranks unless
    ``SHARDPLAN_PROFILE`` names another); otherwise the caller must say which."""
    if given is not None:
        return given
    if plan.cost is not None:
        return plan.cost.profile
    device = plan.task.topology.device
    if get_profile(DEFAULT_PROFILE).device == device:
        return DEFAULT_PROFILE
    raise InputError("profile", f"the plan's ranks are {device} and it names no profile (it has no cost block)",
                     f"name one: {profiles_of_device(device)}")


def new_profile(name: str, like: str, description: str | None = None) -> Profile:
    """Add a profile of this machine: ``like``'s protocol and budgets under a new name, its folder
    ``data/profiles/<name>/`` with ``profile.json`` and a README of the machine and what to run next.

    A CPU profile records this host's CPU (so that its data can be collected here and only here); a GPU
    profile, like the committed ones, its device. Nothing is written when the name is bad or taken.
    """
    base = get_profile(like)
    if not re.fullmatch(PROFILE_NAME, name):
        raise InputError("name", f"{name!r} is not a profile name",
                         "use lower-case letters, digits, '.', '_' and '-', starting with a letter or digit")
    folder = PROFILE_DIR / name
    if name in PROFILES or name in BROKEN_PROFILES or (folder / PROFILE_FILE).exists():
        raise InputError("name", f"profile {name!r} exists ({folder / PROFILE_FILE})", "choose another name")
    cpu = host_cpu() if base.device == "cpu" else ""
    gpu = _gpu_name() if base.device == "cuda" else ""
    chip = host_chip() if cpu else HostChip()
    profile = replace(base, name=name, cpu_model=cpu, l3_mib=chip.l3_mib, cpu_signature=chip.signature,
                      description=description or f"{cpu or gpu or 'a GPU machine'}, measured with {like}'s protocol "
                      "and budgets")
    if not (folder / "README.md").exists():  # a folder made by hand keeps its own notes
        write_text_atomic(folder / "README.md", _new_profile_readme(profile, like, gpu))
    write_text_atomic(folder / PROFILE_FILE, json.dumps(profile.to_json(), indent=2) + "\n")
    PROFILES[name] = profile
    return profile


def _gpu_name() -> str:
    """This machine's first GPU as CUDA names it, or "" without one."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""


def _new_profile_readme(profile: Profile, like: str, gpu: str) -> str:
    """The new profile's README: the machine (``gpu``: its GPU's name, or "") and libraries it starts on,
    and the commands that fill it."""
    from .kernel import fbgemm_versions
    from .profile_steps import steps

    stamp = machine_stamp()
    try:
        libs = ", ".join(f"{k} {v}" for k, v in fbgemm_versions().items())
    except ImportError:  # a profile may be made before FBGEMM is installed (a lent GPU's first call)
        import torch

        libs = f"torch {torch.__version__}, no fbgemm_gpu yet"
    name = profile.name
    chip = profile.chip.describe()
    cache = f", {chip}" if chip else ""
    return "\n".join([
        f"# Profile `{name}`", "",
        f"Made {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC by `shardplan profiles --new {name} --like {like}` "
        f"on {stamp['cpu_model']!r} ({stamp['cpu_cores']} cores{cache}{f', {gpu}' if gpu else ''}; {libs}): "
        f"`{like}`'s protocol and budgets (`profile.json`; edit it before collecting if this machine needs "
        "others)." + (f" Its `published` figures are `{like}`'s too: set this GPU's HBM bandwidth and links, "
                      "with their sources, before planning with it untrained (they price it until `train` "
                      "has run, and its comm always)." if profile.published else ""), "",
        "Fill it, with nothing else heavy running (the cores are the instrument), then commit this folder "
        f"(`shardplan profiles --show {name}` says how far it has got):", "",
        "| step | file | command |", "| --- | --- | --- |",
        *(f"| {s.name} | `{s.file}` | {'; '.join(f'`{c}`' for c in s.commands)} |" for s in steps(profile)), "",
        "Record here each file's dates, the machine's load and the command that made it.", ""])


def machine_stamp() -> dict[str, object]:
    """What every cost-data row records about the machine that produced it: the CPU's name, and its family,
    model and L3 (:class:`HostChip`), since one name covers chips on which the labels do not hold."""
    chip = host_chip()
    return {"cpu_model": host_cpu(), "cpu_signature": chip.signature, "l3_mib": chip.l3_mib,
            "cpu_cores": os.cpu_count() or 0, "hostname": platform.node()}


def host_cpu() -> str:
    """This host's CPU as cost-data rows record it (``/proc/cpuinfo``'s model name). Read on its own, not
    through :func:`machine_stamp`: profile matching and every measured cost block ask for the name alone."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or ""


def host_l3_mib(cache_dir: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> float | None:
    """This host's last-level (L3) cache in MiB as Linux reports it to this guest, or ``None`` where it does
    not (no sysfs, no L3 listed)."""
    units = {"K": 1 / 1024, "M": 1.0, "G": 1024.0}
    try:
        for index in sorted(cache_dir.glob("index*")):
            if (index / "level").read_text().strip() == "3":
                size = (index / "size").read_text().strip()
                return float(size[:-1]) * units[size[-1]] if size[-1] in units else float(size) / 2**20
    except (OSError, ValueError):
        pass
    return None


def host_cpu_signature(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """This host's CPU family and model as ``/proc/cpuinfo`` gives them ("family 25 model 17"), or ``None``
    where it does not."""
    found: dict[str, str] = {}
    try:
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("cpu family", "model") and key not in found:
                found[key] = value.strip()
            if not line.strip() and found:  # the first processor's block is enough
                break
    except OSError:
        return None
    family, model = found.get("cpu family", ""), found.get("model", "")
    return f"family {family} model {model}" if family.isdigit() and model.isdigit() else None


@dataclass(frozen=True)
class HostChip:
    """What tells two hosts of one CPU name apart, as a host reports it: its L3 (MiB) and its CPU's family
    and model; ``None`` where it reports no such thing. Read once (:func:`host_chip`) and handed to every
    check and message it feeds, so that they all speak of one reading."""

    l3_mib: float | None = None
    signature: str | None = None

    def describe(self) -> str:
        """What is known of it, in words ("family 25 model 17, L3 32 MiB"; "" where nothing is)."""
        cache = f"L3 {self.l3_mib:g} MiB" if self.l3_mib else None
        return ", ".join(part for part in (self.signature, cache) if part)


def host_chip() -> HostChip:
    """This host's :class:`HostChip`."""
    return HostChip(host_l3_mib(), host_cpu_signature())


def chip_differences(profile: Profile, chip: HostChip) -> list[str]:
    """How a host of :class:`HostChip` ``chip`` differs from the one ``profile``'s labels were taken on, one
    phrase a difference: an L3 beyond ``CACHE_FACTOR`` either way, another CPU family or model. Empty where
    they agree, where either side is unknown, and for GPU profiles (they name their device, not a CPU)."""
    if profile.device != "cpu":
        return []
    found = []
    if profile.l3_mib and chip.l3_mib and not 1 / CACHE_FACTOR <= chip.l3_mib / profile.l3_mib <= CACHE_FACTOR:
        found.append(f"L3 is {chip.l3_mib:g} MiB where {profile.name}'s labels were taken with {profile.l3_mib:g} MiB")
    if profile.cpu_signature and chip.signature and chip.signature != profile.cpu_signature:
        found.append(f"CPU is {chip.signature} where {profile.name}'s labels were taken on {profile.cpu_signature}")
    return found


def chip_differs(profile: Profile, chip: HostChip) -> bool:
    """Whether :func:`chip_differences` finds any."""
    return bool(chip_differences(profile, chip))


def chip_note(profile: Profile, chip: HostChip) -> str | None:
    """:func:`chip_differences` in a sentence, or ``None`` where there are none."""
    found = chip_differences(profile, chip)
    if not found:
        return None
    return (f"this host's {' and its '.join(found)}: another machine under the same CPU name, on which "
            "the labels' timings do not hold (FBGEMM's kernels are generated per instruction set, and a set "
            "that touches tens of MB a batch leaves the cache at another size)")


def runs_here(profile: Profile) -> bool:
    """Whether this host is the CPU ``profile`` was measured on (GPU profiles name their device
    instead, and a profile without a recorded CPU matches any host)."""
    return profile.device != "cpu" or not profile.cpu_model or host_cpu().startswith(profile.cpu_model)


def measured_on_this_cpu(profile: Profile) -> bool:
    """Whether ``profile`` is a CPU profile whose recorded CPU is this host's (stricter than
    :func:`runs_here`, which also passes GPU profiles and profiles that record no CPU)."""
    return profile.device == "cpu" and bool(profile.cpu_model) and runs_here(profile)


# Two L3 sizes further apart than this are two machines: a guest may see a slice of a host's cache, and the ones
# met so far were 32, 105 and 480 MiB
CACHE_FACTOR = 1.25
DEFAULT_KIND = ("sgd", "fp32")  # a task's optimizer and weight type unless it names others (DESIGN.md)


def _model_metadata(p: Profile) -> dict:
    """The metadata of ``p``'s compute model file ({} where there is none or it cannot be read)."""
    path = p.dir / "compute-model.json"
    try:
        return _file_metadata(str(path), path.stat().st_mtime_ns)
    except OSError:
        return {}


@lru_cache(maxsize=32)
def _file_metadata(path: str, mtime_ns: int) -> dict:  # a model file is megabytes of weights: read it once
    try:
        meta = json.loads(Path(path).read_text())["metadata"]
        return meta if isinstance(meta, dict) else {}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def metadata_kinds(meta: dict) -> tuple[list[str], list[str]]:
    """The optimizers and weight types a compute model's ``metadata`` says its timings ran with; a model that
    records neither was timed with sgd and fp32, as every model trained before ``train`` recorded them."""
    return list(meta.get("optimizers", [DEFAULT_KIND[0]])), list(meta.get("dtypes", [DEFAULT_KIND[1]]))


def model_kinds(p: Profile) -> tuple[list[str], list[str]]:
    """:func:`metadata_kinds` of ``p``'s compute model file."""
    return metadata_kinds(_model_metadata(p))


def prices_kind(p: Profile, kind: tuple[str, str]) -> bool:
    """Whether ``p``'s compute model was trained on timings of ``kind`` (optimizer, dtype)."""
    optimizers, dtypes = model_kinds(p)
    return kind[0] in optimizers and kind[1] in dtypes


def profiles_pricing(device: str, kind: tuple[str, str]) -> list[str]:
    """The names of the trained profiles of ``device`` whose compute model prices ``kind``."""
    return [n for n, p in PROFILES.items() if p.device == device and (p.dir / "compute-model.json").exists()
            and prices_kind(p, kind)]


def host_profiles(kind: tuple[str, str] = DEFAULT_KIND) -> list[Profile]:
    """The CPU profiles measured on this host's CPU whose trained compute model prices ``kind`` (optimizer,
    weight type), the most apt first: one whose labels' host has this host's L3 and CPU family and model before
    one whose has not (:func:`chip_differs`), then the longest recorded CPU name (the most specific), then the
    latest trained
    (a profile made here after a committed one of the same CPU name is the one its maker collected for),
    then by name."""
    found = [p for p in PROFILES.values() if measured_on_this_cpu(p) and (p.dir / "compute-model.json").exists()
             and prices_kind(p, kind)]
    if len(found) < 2:
        return found

    def trained(p: Profile) -> str:
        return str(_model_metadata(p).get("date", ""))

    by_name = sorted(found, key=lambda p: p.name)
    by_date = sorted(by_name, key=trained, reverse=True)
    by_cpu = sorted(by_date, key=lambda p: len(p.cpu_model), reverse=True)  # sorts are stable
    here = host_chip()  # read once for all the profiles
    return sorted(by_cpu, key=lambda p: chip_differs(p, here))


def host_profile(kind: tuple[str, str] = DEFAULT_KIND) -> Profile | None:
    """This host's own profile for tasks of ``kind`` (:func:`host_profiles`' first), if any."""
    return next(iter(host_profiles(kind)), None)


def local_profile(kind: tuple[str, str] = DEFAULT_KIND) -> str:
    """The profile to measure this host's tasks of ``kind`` (optimizer, weight type) with: the one
    ``SHARDPLAN_PROFILE`` names, else its own (:func:`host_profile`), else the default."""
    if os.environ.get(PROFILE_ENV):
        return DEFAULT_PROFILE
    p = host_profile(kind)
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


def host_mismatch_note(profile: Profile) -> str | None:
    """Why ``profile``'s labels were not taken on this host: another CPU name (:func:`foreign_host_note`), else
    another chip under the same name (:func:`chip_note`); ``None`` when neither."""
    return foreign_host_note(profile) or chip_note(profile, host_chip())


def host_record(profile: Profile) -> dict[str, str]:
    """The host a measurement runs on, for its cost block; on a CPU other than ``profile``'s (by name, or by
    :func:`chip_note`), also why its figures do not compare with the profile's predictions (and a warning now)."""
    note = host_mismatch_note(profile)
    if note:
        warnings.warn(note, stacklevel=3)
    return {"host_cpu": host_cpu(), **({"foreign_host": note} if note else {})}


def check_collect_target(profile: Profile, out: Path) -> None:
    """Refuse to write this host's timings into another CPU's committed cost data, or another machine's of
    the same CPU name and another L3 or CPU model (:func:`chip_note`)."""
    note = host_mismatch_note(profile)
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
