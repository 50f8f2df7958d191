"""House style the next engineer can rely on: the package's lines fit a 120-column editor."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_package_lines_fit_in_120_columns() -> None:
    long = [f"{path.relative_to(ROOT)}:{i}" for path in sorted((ROOT / "shardplan").rglob("*.py"))
            for i, line in enumerate(path.read_text().splitlines(), 1) if len(line) > 120]
    assert long == []
