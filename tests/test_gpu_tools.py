"""The GPU job's tools, exercised on CPU: carrying fbgemm-gpu in independent parts, and its check."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("fbgemm_parts", ROOT / "scripts" / "gpu" / "fbgemm_parts.py")
fbgemm_parts = importlib.util.module_from_spec(spec)
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


def test_lean_drop_keeps_the_training_libraries() -> None:
    assert fbgemm_parts._dropped("fbgemm_gpu/fbgemm_gpu_tbe_training_backward_vbe.so", lean=True)
    assert not fbgemm_parts._dropped("fbgemm_gpu/fbgemm_gpu_tbe_training_backward.so", lean=True)
    assert not fbgemm_parts._dropped("fbgemm_gpu/fbgemm_gpu_tbe_training_backward_vbe.so", lean=False)


def test_check_runs_the_tbe_training_op(capsys) -> None:
    fbgemm_parts.check()  # on the CPU build here: the same op, forward and fused-SGD backward
    assert '"fused_sgd_updated_weights": true' in capsys.readouterr().out


def test_lean_package_drops_the_libraries_from_the_loader_list_too(tmp_path) -> None:
    init = 'libs = [\n    "fbgemm_gpu_config",\n    "fbgemm_gpu_tbe_inference",\n    "fbgemm_gpu_tbe_training_backward",\n' \
           '    "fbgemm_gpu_tbe_training_backward_vbe",\n    "fbgemm_gpu_py",\n]\n'
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
