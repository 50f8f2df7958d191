"""The GPU job's tools, exercised on CPU: carrying fbgemm-gpu in independent parts, and its check."""
from __future__ import annotations

import importlib.util
import os
import struct
import sys
from pathlib import Path

from conftest import ROOT

spec = importlib.util.spec_from_file_location("fbgemm_parts", ROOT / "scripts" / "gpu" / "fbgemm_parts.py")
fbgemm_parts = importlib.util.module_from_spec(spec)
sys.modules["fbgemm_parts"] = fbgemm_parts  # unpack's worker processes find their function by module name
spec.loader.exec_module(fbgemm_parts)


def test_parts_are_independent_under_the_limit_and_unpack_exactly(tmp_path) -> None:
    members = {f"fbgemm_gpu/lib{i}.so": os.urandom(30_000 + 5_000 * i) for i in range(8)}  # incompressible
    members["fbgemm_gpu/__init__.py"] = b"__version__ = 'test'\n" * 100
    members["fbgemm_gpu/huge.so"] = os.urandom(150_000)  # over one part even compressed: chunked
    limit_mib = 0.1
    parts = fbgemm_parts.pack(members, tmp_path / "parts", limit_mib, chunk_bytes=60_000)
    assert len(parts) >= 3 and all(p.stat().st_size <= limit_mib * 2**20 for p in parts)
    target = tmp_path / "site"
    for p in reversed(parts):  # any order, one at a time, as they arrive
        fbgemm_parts.unpack([p], target)
    fbgemm_parts.unpack(parts, target)  # idempotent
    assert {str(p.relative_to(target)) for p in target.rglob("*") if p.is_file() and not p.name.startswith(".")} \
        == set(members)
    assert all((target / k).read_bytes() == v for k, v in members.items())
    assert os.access(target / "fbgemm_gpu" / "lib0.so", os.X_OK)
    fresh = tmp_path / "fresh"  # every part at once into an empty tree: parallel processes, one new folder
    fbgemm_parts.unpack(parts, fresh)
    assert all((fresh / k).read_bytes() == v for k, v in members.items())


def test_lean_drop_keeps_the_training_libraries() -> None:
    assert fbgemm_parts._dropped("fbgemm_gpu/fbgemm_gpu_tbe_training_backward_vbe.so", lean=True)
    assert not fbgemm_parts._dropped("fbgemm_gpu/fbgemm_gpu_tbe_training_backward.so", lean=True)
    assert not fbgemm_parts._dropped("fbgemm_gpu/fbgemm_gpu_tbe_training_backward_vbe.so", lean=False)


def test_check_runs_the_tbe_training_op(capsys) -> None:
    fbgemm_parts.check()  # on the CPU build here: the same op, forward and fused-SGD backward
    assert '"fused_sgd_updated_weights": true' in capsys.readouterr().out


def test_lean_package_drops_the_libraries_from_the_loader_list_too(tmp_path) -> None:
    init = ('libs = [\n    "fbgemm_gpu_config",\n    "fbgemm_gpu_tbe_inference",\n'
            '    "fbgemm_gpu_tbe_training_backward",\n    "fbgemm_gpu_tbe_training_backward_vbe",\n'
            '    "fbgemm_gpu_py",\n]\n')
    lean = fbgemm_parts.lean_init(init)
    assert '"fbgemm_gpu_tbe_inference"' not in lean and '"fbgemm_gpu_tbe_training_backward_vbe"' not in lean
    assert all(f'"{k}"' in lean for k in ("fbgemm_gpu_config", "fbgemm_gpu_tbe_training_backward", "fbgemm_gpu_py"))
    full = tmp_path / "full" / "fbgemm_gpu"
    full.mkdir(parents=True)
    (full / "__init__.py").write_text(init)
    for name in ("fbgemm_gpu_py.so", "fbgemm_gpu_tbe_inference.so"):
        (full / name).write_bytes(b"\x7fELF")
    view = fbgemm_parts.lean_view(tmp_path / "full", tmp_path / "lean")
    assert (view / "fbgemm_gpu" / "fbgemm_gpu_py.so").is_symlink()
    assert not (view / "fbgemm_gpu" / "fbgemm_gpu_tbe_inference.so").exists()
    assert (view / "fbgemm_gpu" / "__init__.py").read_text() == lean


def _fat_library(images: list[tuple[int, bytes]]) -> bytes:
    """A minimal 64-bit ELF with a ``.nv_fatbin`` section holding one fat-binary block of ``images``
    (arch, payload), laid out as :func:`fbgemm_parts.fatbin_entries` reads it."""
    entries = b"".join(struct.pack("<HHIQ", 2, 0x101, 64, len(data)) + bytes(12) + struct.pack("<I", arch)
                       + bytes(64 - 32) + data for arch, data in images)
    fatbin = struct.pack("<IHHQ", fbgemm_parts.FATBIN_MAGIC, 1, 16, len(entries)) + entries
    names = b"\0.shstrtab\0.nv_fatbin\0"
    body_at = 64
    names_at = body_at + len(fatbin)
    shoff = names_at + len(names)
    shoff += -shoff % 8
    head = bytearray(64)
    head[:4] = b"\x7fELF"
    struct.pack_into("<Q", head, 0x28, shoff)
    struct.pack_into("<HHH", head, 0x3A, 64, 3, 1)
    sections = bytes(64)  # the null section
    sections += struct.pack("<IIQQQQ", 1, 3, 0, 0, names_at, len(names)) + bytes(24)
    sections += struct.pack("<IIQQQQ", 11, 1, 0, 0, body_at, len(fatbin)) + bytes(24)
    return bytes(head) + fatbin + names + bytes(shoff - names_at - len(names)) + sections


def test_keep_arch_zeroes_the_other_chips_images_and_keeps_the_rest() -> None:
    sm80, sm90, sm100 = os.urandom(96), os.urandom(128), os.urandom(80)
    lib = _fat_library([(80, sm80), (90, sm90), (100, sm100)])
    assert [(size, arch) for _, size, arch in fbgemm_parts.fatbin_entries(lib)] == [(96, 80), (128, 90), (80, 100)]
    kept = fbgemm_parts.keep_arch(lib, 90)
    assert len(kept) == len(lib)
    for off, size, arch in fbgemm_parts.fatbin_entries(kept):  # every header kept, so the list still reads
        assert kept[off:off + size] == (sm90 if arch == 90 else bytes(size))
    assert fbgemm_parts.keep_arch(lib, 75) == lib  # no image for that chip: left whole
    assert fbgemm_parts.keep_arch(b"not an ELF", 90) == b"not an ELF"


def test_gpu_rows_name_the_gpu_they_were_timed_on() -> None:
    from shardplan.cost.collect import gpu_identity

    out = "580.159.04, GPU-37c68a69-f4cf-626f-686b-0abcde384db6\n580.159.04, GPU-8514e371-6f8d-5347-a350-835aa900aa09\n"
    assert gpu_identity(out) == ("580.159.04", "GPU-37c68a69-f4cf-626f-686b-0abcde384db6")  # the first GPU's
    assert gpu_identity("") == ("", "")  # no nvidia-smi output: nothing invented


def test_job_rank_parts_stage_times_a_ranks_ops_apart(tmp_path) -> None:
    # the stage a lease runs, here on the CPU twin: python3 is this environment's (the lent machine's is its own)
    import subprocess

    import pandas as pd

    from shardplan.cost.specs import ShardSpec, specs_to_json

    mixed = [ShardSpec("a", 400, 0, 400, 8, 2.0, 0.5, 128), ShardSpec("dp", 20, 0, 20, 8, 1.0, 0.5, 32)]
    src = tmp_path / "ranks.parquet"
    pd.DataFrame([{"seed": 7, "sample": 0, "source": "plan-rank", "task": "t", "searcher": "torchrec", "rank": 0,
                   "num_shards": 2, "shards": specs_to_json(mixed), "id_seed": 0, "optimizer": "sgd",
                   "dtype": "fp32"}]).to_parquet(src)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", PROFILE="cpu-2c",
               OUT=str(tmp_path / "out"), STATE=str(tmp_path / "state"), BATCH_PARTS_SRC=str(src),
               BATCH_PARTS_REPS="1")
    subprocess.run(["bash", "scripts/gpu/job.sh", "rank-parts"], cwd=ROOT, env=env, check=True, capture_output=True)
    df = pd.read_parquet(tmp_path / "out" / "compute-batch-parts.parquet")
    assert len(df) == 1 and list(df.iloc[0].part_batches) == [32, 128]
