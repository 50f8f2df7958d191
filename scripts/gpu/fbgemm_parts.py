#!/usr/bin/env python3
"""Carry fbgemm-gpu to a GPU machine without internet, in independent parts.

The GPU machines this project borrows have Python 3.12 and torch 2.11.0+cu130
but no fbgemm and no network; a call to them carries at most 64 MiB. The
matching build is ``fbgemm-gpu==1.6.0`` (CUDA 13): a 465 MB wheel, 2.37 GiB
unpacked. This script (standard library only, so it runs on both machines):

``pack``    downloads the wheel (on a machine with internet), unzips it, drops
            the libraries that table-batched training with a fused optimizer
            does not load (``--lean``; see LEAN_DROP), cuts files over 256 MiB
            into chunks, and writes the files as N *independent* ``.tar.xz`` parts, each under ``--max-part-mib``, so
            each part can be unpacked on arrival (a machine that goes cold
            between calls loses nothing already unpacked).
            ``--keep-arch 90`` zeroes the GPU code built for other chips
            (sm_80, sm_100) inside each library's fat binary: 160 MiB of parts
            become 78 (run on an H200 on 2026-11-26: the loader picks the
            sm_90 images and never reads the zeroed ones).
``unpack``  extracts parts into a target folder (Python's ``lzma``: no ``zstd``
            or ``xz`` binary needed), one process a part; idempotent, one marker per part.
``lean-check`` tries what ``--lean`` would carry: a view of an unpacked full
            package without the dropped libraries, its loader list patched.
``check``   imports fbgemm_gpu from the target and runs one forward and
            backward of ``SplitTableBatchedEmbeddingBagsCodegen`` with a fused
            SGD on the GPU (on CPU when there is none, for the CPU build).

    python scripts/gpu/fbgemm_parts.py pack --out build/fbgemm-parts --keep-arch 90 --preset 6
    python scripts/gpu/fbgemm_parts.py unpack build/fbgemm-parts/part-*.tar.xz --target /tmp/fbgemm
    PYTHONPATH=/tmp/fbgemm python scripts/gpu/fbgemm_parts.py check
"""
from __future__ import annotations

import argparse
import io
import json
import lzma
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import zipfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

WHEEL_SPEC = "fbgemm-gpu==1.6.0"
# Libraries of fbgemm_gpu 1.6.0 that TBE training with a fused optimizer does not need (variable
# batch, GWD, inference-only and dense-backward variants: about 1 GB unpacked). `check` is the
# judge: if it fails with a lean package, pack without --lean.
LEAN_DROP = ("vbe", "gwd", "_inference", "dense")


def download(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    found = sorted(dest.glob("fbgemm_gpu-1.6.0-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", WHEEL_SPEC, "--no-deps", "--only-binary", ":all:",
                        "--python-version", "3.12", "--platform", "manylinux_2_28_x86_64", "-d", str(dest)],
                       check=True)
        found = sorted(dest.glob("fbgemm_gpu-1.6.0-*.whl"))
    return found[0]


def _dropped(name: str, lean: bool) -> bool:
    base = name.rsplit("/", 1)[-1]
    return lean and base.endswith(".so") and any(k in base for k in LEAN_DROP)


def lean_init(text: str) -> str:
    """fbgemm_gpu's ``__init__.py`` without the dropped libraries in its load list (it loads every
    library it lists and raises on a missing one)."""
    return "".join(line for line in text.splitlines(keepends=True)
                   if not re.fullmatch(r'\s*"fbgemm_gpu_\w+",\s*', line)
                   or not _dropped(line.strip().strip('",') + ".so", lean=True))


def lean_view(target: Path, out: Path) -> Path:
    """A lean package made of links into an unpacked full one (``target``), with the patched loader
    list: what ``pack --lean`` would carry, tried without carrying it."""
    src = target / "fbgemm_gpu"
    for p in src.rglob("*"):
        rel = p.relative_to(target)
        if p.is_dir() or _dropped(str(rel), lean=True):
            continue
        dest = out / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.exists() or dest.is_symlink():
            dest.unlink()
        if rel == Path("fbgemm_gpu/__init__.py"):
            dest.write_text(lean_init(p.read_text()))
        else:
            dest.symlink_to(p)
    return out


FATBIN_MAGIC = 0xBA55ED50
CHUNK = re.compile(r"^(?P<name>.+)\.chunk(?P<k>\d{3})of(?P<n>\d{3})$")


def _elf_section(data: bytes, wanted: str) -> tuple[int, int] | None:
    """(offset, size) of the named section of a 64-bit little-endian ELF file, or None."""
    if data[:4] != b"\x7fELF":
        return None
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    heads = [struct.unpack_from("<I4xQ8xQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = heads[shstrndx][2]
    for name, _flags, off, size in heads:
        if data[names + name:data.index(b"\0", names + name)].decode() == wanted:
            return off, size
    return None


def fatbin_entries(data: bytes) -> list[tuple[int, int, int]]:
    """(payload offset, payload size, sm arch) of every image in a library's ``.nv_fatbin`` section.

    Layout (as the CUDA tools write it): blocks of a 16-byte header (magic 0xBA55ED50, version,
    header size, size of the entries) then entries, each a header (kind, header size, payload size,
    ..., arch at byte 28) and its payload."""
    sec = _elf_section(data, ".nv_fatbin")
    if sec is None:
        return []
    out = []
    p, end = sec[0], sec[0] + sec[1]
    while p + 16 <= end:
        magic, _ver, head, size = struct.unpack_from("<IHHQ", data, p)
        if magic != FATBIN_MAGIC:
            p += 8  # blocks are 8-byte aligned; padding between them
            continue
        q, block_end = p + head, p + head + size
        while q < block_end:
            _kind, _u, ehead, esize = struct.unpack_from("<HHIQ", data, q)
            arch, = struct.unpack_from("<I", data, q + 28)
            out.append((q + ehead, esize, arch))
            q += ehead + esize
        p = block_end
    return out


def keep_arch(data: bytes, arch: int) -> bytes:
    """The library with every fat-binary image built for another chip zeroed (headers kept, so the
    loader still reads the list and picks ``arch``'s image; the zeroes compress to nothing)."""
    entries = fatbin_entries(data)
    if not any(a == arch for _, _, a in entries):
        return data  # no image for this chip (or no GPU code at all): leave it whole
    out = bytearray(data)
    for off, size, a in entries:
        if a != arch:
            out[off:off + size] = bytes(size)
    return bytes(out)


def split_large(members: dict[str, bytes], chunk_bytes: int) -> dict[str, bytes]:
    """Files over ``chunk_bytes`` become ``NAME.chunkKKKofNNN`` pieces (one library is 1.1 GiB unpacked,
    more than one part can hold even compressed); :func:`unpack` joins them once all have arrived."""
    out: dict[str, bytes] = {}
    for name, data in members.items():
        if len(data) <= chunk_bytes:
            out[name] = data
            continue
        n = -(-len(data) // chunk_bytes)
        for k in range(n):
            out[f"{name}.chunk{k:03d}of{n:03d}"] = data[k * chunk_bytes:(k + 1) * chunk_bytes]
    return out


def pack(members: dict[str, bytes], out: Path, max_part_mib: float, ratio_guess: float = 0.2,
         preset: int = 9 | lzma.PRESET_EXTREME, chunk_bytes: int = 256 * 2**20) -> list[Path]:
    """Write ``members`` (path -> bytes) as independent ``.tar.xz`` parts under ``max_part_mib``.

    Large files are cut into chunks first; files are dealt largest first to the
    part with the least estimated compressed size; a part that comes out too
    large is split in two and written again.
    """
    members = split_large(members, chunk_bytes)
    limit = max_part_mib * 2**20
    est_total = sum(len(b) for b in members.values()) * ratio_guess
    n = max(1, int(est_total // (0.8 * limit)) + 1)
    groups: list[list[str]] = [[] for _ in range(n)]
    load = [0.0] * n
    for name in sorted(members, key=lambda k: -len(members[k])):
        i = load.index(min(load))
        groups[i].append(name)
        load[i] += len(members[name])
    out.mkdir(parents=True, exist_ok=True)
    written: list[tuple[list[str], bytes]] = []
    while groups:
        g = groups.pop()
        if not g:
            continue
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name in sorted(g):
                info = tarfile.TarInfo(name)
                info.size = len(members[name])
                info.mode = 0o755 if name.endswith(".so") else 0o644
                tar.addfile(info, io.BytesIO(members[name]))
        data = xz(buf.getvalue(), preset)
        if len(data) > limit and len(g) > 1:
            groups += [g[0::2], g[1::2]]
            continue
        if len(data) > limit:
            raise SystemExit(f"{g[0]} alone compresses to {len(data) / 2**20:.1f} MiB, over the part limit")
        written.append((g, data))
    paths = []
    for k, (g, data) in enumerate(written):
        p = out / f"part-{k:02d}.tar.xz"
        p.write_bytes(data)
        paths.append(p)
    (out / "manifest.json").write_text(json.dumps({
        "parts": [{"file": p.name, "bytes": p.stat().st_size, "files": len(g)} for p, (g, _) in zip(paths, written)],
        "files": len(members), "unpacked_bytes": sum(len(b) for b in members.values())}, indent=2))
    return paths


def xz(data: bytes, preset: int) -> bytes:
    """xz-compress on every core with the ``xz`` tool where there is one (Python's ``lzma`` reads its
    multi-block output), else with ``lzma`` on one."""
    if shutil.which("xz"):
        level = f"-{preset & 0xF}" + ("e" if preset & lzma.PRESET_EXTREME else "")
        return subprocess.run(["xz", "-T0", level, "-c"], input=data, capture_output=True, check=True).stdout
    return lzma.compress(data, preset=preset)


def _unpack_one(part: Path, target: Path) -> str:
    """Extract one part unless its marker says it was; what was done, or "" for nothing."""
    marker = target / f".unpacked-{part.name}"
    if marker.exists():
        return ""
    with tarfile.open(part, mode="r:xz") as tar:
        for member in tar:
            # Parts unpack in parallel processes into one tree, and tarfile makes a member's missing parent
            # folders with a bare os.makedirs: two parts that share a new folder raced there on the H100
            # (FileExistsError, 2026-11-26). Made here first, with exist_ok, there is no race.
            (target / member.name).parent.mkdir(parents=True, exist_ok=True)
            tar.extract(member, target, filter="data")
    marker.write_text("ok\n")
    return f"unpacked {part.name} into {target}"


def unpack(parts: list[Path], target: Path) -> None:
    """Extract every part (one process each: the parts are independent, and ``lzma`` uses one core),
    then join the large files whose chunks have all arrived. Idempotent: one marker per part."""
    target.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(max_workers=min(len(parts), os.cpu_count() or 1) or 1) as pool:
        for line in pool.map(_unpack_one, parts, [target] * len(parts)):
            if line:
                print(line)
    join_chunks(target)


def join_chunks(target: Path) -> None:
    """Join every large file whose chunks have all arrived (and drop the chunks)."""
    groups: dict[Path, dict[int, Path]] = {}
    totals: dict[Path, int] = {}
    for p in target.rglob("*.chunk*of*"):
        m = CHUNK.match(str(p))
        if m:
            whole = Path(m["name"])
            groups.setdefault(whole, {})[int(m["k"])] = p
            totals[whole] = int(m["n"])
    for whole, chunks in groups.items():
        if len(chunks) < totals[whole]:
            continue  # more parts to come
        with open(whole, "wb") as f:
            for k in range(totals[whole]):
                f.write(chunks[k].read_bytes())
        whole.chmod(0o755 if whole.suffix == ".so" else 0o644)
        for c in chunks.values():
            c.unlink()
        print(f"joined {whole.name} from {totals[whole]} chunks")


def check() -> None:
    import torch
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (ComputeDevice,
                                                                        SplitTableBatchedEmbeddingBagsCodegen)

    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    loc = EmbeddingLocation.DEVICE if cuda else EmbeddingLocation.HOST
    tbe = SplitTableBatchedEmbeddingBagsCodegen(
        [(1000, 64, loc, ComputeDevice.CUDA if cuda else ComputeDevice.CPU)],
        optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.1, device=dev)
    before = tbe.split_embedding_weights()[0].detach().clone()
    ids = torch.randint(0, 1000, (256,), device=dev)
    offsets = torch.arange(0, 257, 4, device=dev)[:65]
    out = tbe(ids, offsets)
    out.sum().backward()
    changed = not torch.equal(before, tbe.split_embedding_weights()[0])
    print(json.dumps({"fbgemm_gpu": __import__("fbgemm_gpu").__version__, "device": str(dev),
                      "output": list(out.shape), "fused_sgd_updated_weights": changed}))
    if not changed:
        raise SystemExit("the fused optimizer did not update the weights")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("--wheel-dir", default="build/wheels")
    p.add_argument("--out", default="build/fbgemm-parts")
    p.add_argument("--max-part-mib", type=float, default=60.0)
    p.add_argument("--lean", action="store_true", help="drop libraries TBE training does not load")
    p.add_argument("--preset", type=int, default=9, help="xz preset 0-9 (9: smallest, slowest)")
    p.add_argument("--keep-arch", type=int, help="zero the GPU code of every other chip (90: H100/H200)")
    u = sub.add_parser("unpack")
    u.add_argument("parts", nargs="+", type=Path)
    u.add_argument("--target", type=Path, default=Path("/tmp/fbgemm"))
    sub.add_parser("check")
    lv = sub.add_parser("lean-check", help="check a lean view of an unpacked full package (links, patched loader)")
    lv.add_argument("--target", type=Path, default=Path("/tmp/fbgemm"))
    lv.add_argument("--out", type=Path, default=Path("/tmp/fbgemm-lean"))
    args = ap.parse_args()
    if args.cmd == "pack":
        wheel = download(Path(args.wheel_dir))
        with zipfile.ZipFile(wheel) as z:
            members = {i.filename: z.read(i) for i in z.infolist()
                       if not i.is_dir() and not _dropped(i.filename, args.lean)}
        if args.keep_arch:
            members = {k: keep_arch(v, args.keep_arch) if k.endswith(".so") else v for k, v in members.items()}
        if args.lean:
            members["fbgemm_gpu/__init__.py"] = lean_init(members["fbgemm_gpu/__init__.py"].decode()).encode()
        for path in pack(members, Path(args.out), args.max_part_mib, preset=args.preset):
            print(f"{path}: {path.stat().st_size / 2**20:.1f} MiB")
    elif args.cmd == "unpack":
        unpack(args.parts, args.target)
    elif args.cmd == "lean-check":
        view = lean_view(args.target, args.out)
        env = {**os.environ, "PYTHONPATH": f"{view}:{os.environ.get('PYTHONPATH', '')}"}
        sys.exit(subprocess.run([sys.executable, __file__, "check"], env=env).returncode)
    else:
        check()


if __name__ == "__main__":
    main()
