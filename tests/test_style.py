"""House style the next engineer can rely on: the project's Python lines fit a 120-column editor."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_python_lines_fit_in_120_columns() -> None:
    files = sorted(p for folder in ("shardplan", "tests", "bench", "scripts") for p in (ROOT / folder).rglob("*.py"))
    long = [f"{path.relative_to(ROOT)}:{i}" for path in files
            for i, line in enumerate(path.read_text().splitlines(), 1) if len(line) > 120]
    assert files and long == []
