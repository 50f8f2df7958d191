"""An index of ``bench/results/``: every results file, the script that wrote it, when, and where it is cited.

The folder holds every run the README and ``docs/`` quote, old and new (the record cites them by
name, so none is deleted). This writes ``bench/results/README.md``: results grouped by the script that
wrote them (its docstring's first sentence says what it measures), each with its date, the command that
reproduces it where the file records one, and the documents that cite it, newest first. Run it after
adding results; a test checks that the committed index lists every file.

    .venv/bin/python bench/index.py
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
INDEX = RESULTS / "README.md"
CITING = ("README.md", "docs/history.md", "docs/gpu.md", "docs/benchmark.md", "docs/cost-model.md",
          "data/profiles/cpu-2c/README.md", "data/profiles/cpu-2c-xeon/README.md",
          "data/profiles/cpu-2c-nested/README.md")
BENCH_CLI = "shardplan bench"

_DATE = re.compile(r"Date (\d{4}-\d{2}-\d{2}(?: \d{2}:\d{2} UTC)?)|\"date\": \"(\d{4}-\d{2}-\d{2}[^\"]*)\"")
_COMMAND = re.compile(r"Command: `([^`]+)`|\"command\": \"([^\"]+)\"")
_ANY_DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
_SCRIPT = re.compile(r"bench/(\w+)\.py")
# Results named otherwise than their script.
_ALIASES = {"gpu-plans": "bench/gpu_suite.py", "optuna": BENCH_CLI, "bench": BENCH_CLI}
SHARDPLAN_CLI = "shardplan CLI (the command shown)"


@dataclass
class Result:
    """One results name (``NAME.md`` and/or ``NAME.csv``/``NAME.json``)."""

    name: str
    files: list[str] = field(default_factory=list)
    date: str = ""
    command: str = ""
    cited_in: list[str] = field(default_factory=list)

    @property
    def script(self) -> str:
        """``bench/X.py`` or ``shardplan bench``: from the recorded command, else from the name."""
        if self.command.startswith(BENCH_CLI):
            return BENCH_CLI
        if m := _SCRIPT.search(self.command):
            return f"bench/{m.group(1)}.py"
        if self.command.startswith("shardplan "):
            return SHARDPLAN_CLI
        for prefix, script in _ALIASES.items():
            if self.name.startswith(prefix + "-"):
                return script
        for script in sorted(ROOT.glob("bench/*.py"), key=lambda p: -len(p.stem)):  # longest prefix wins
            if self.name.startswith(script.stem.replace("_", "-")):
                return f"bench/{script.name}"
        return "(unknown)"


def _purpose(script: str) -> str:
    if script == SHARDPLAN_CLI:
        return "Results written by other `shardplan` subcommands."
    if script == BENCH_CLI:
        return ("Every searcher on every task of a suite, each task's plans measured interleaved on real "
                "FBGEMM kernels (`shardplan/execute/bench.py`).")
    path = ROOT / script
    if not path.exists():
        return (f"The script was removed with the experiment it measured (reverted); `git log -- {script}` "
                "finds it.")
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(doc.split("\n\n")[0].split())


def _added_dates() -> dict[str, str]:
    """File name -> the date git first added it under ``bench/results/`` (for files that state no date)."""
    try:
        log = subprocess.run(["git", "log", "--diff-filter=A", "--name-only", "--format=@%ad", "--date=short",
                              "--", "bench/results"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    added: dict[str, str] = {}
    date = ""
    for line in log.splitlines():
        if line.startswith("@"):
            date = line[1:]
        elif line.strip():
            added[Path(line).name] = date  # newest first: the last seen is the first add
    return added


def collect() -> list[Result]:
    """Every results name in the folder with what its files say about it."""
    texts = {c: (ROOT / c).read_text() for c in CITING if (ROOT / c).exists()}
    results: dict[str, Result] = {}
    for path in sorted(RESULTS.iterdir()):
        if path == INDEX or path.suffix not in (".md", ".csv", ".json") or ".partial" in path.name:
            continue
        r = results.setdefault(path.stem, Result(path.stem))
        r.files.append(path.name)
        if path.suffix in (".md", ".json"):
            head = path.read_text()[:6000]
            if not r.date and (m := _DATE.search(head) or _ANY_DATE.search(head[:600])):
                r.date = next(g for g in m.groups() if g) if m.groups() else m.group(0)
            if not r.command and (m := _COMMAND.search(head)):
                r.command = m.group(1) or m.group(2)
    added = _added_dates()
    for r in results.values():
        if not r.date and (dates := [added[f] for f in r.files if f in added]):
            r.date = f"{min(dates)} (committed)"
        named = re.compile(re.escape(r.name) + r"(?![\w-])")  # not a longer name it begins
        r.cited_in = [c for c, text in texts.items() if named.search(text)]
    return list(results.values())


def render(results: list[Result]) -> str:
    by_script: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        by_script[r.script].append(r)
    order = sorted(by_script, key=lambda s: (s != BENCH_CLI, s == SHARDPLAN_CLI, s == "(unknown)", s))
    lines = ["# `bench/results/`: what each file is", "",
             "Generated by `.venv/bin/python bench/index.py` (do not edit by hand). Every figure in these files "
             "is measured on real FBGEMM kernels or predicted by a named model, and each file says which. "
             "Grouped by the script that wrote it, newest first; \"cited in\" lists the documents that quote "
             "it. Older runs stay because the record cites them; the current figures are the ones the "
             "top-level README quotes.", "",
             f"{len(results)} results, {sum(len(r.files) for r in results)} files.", ""]
    for script in order:
        rs = sorted(by_script[script], key=lambda r: (r.date, r.name), reverse=True)
        lines += [f"## `{script}`", "", _purpose(script), "",
                  "| result | files | date | cited in | command |", "| --- | --- | --- | --- | --- |"]
        for r in rs:
            files = ", ".join(f"[{Path(f).suffix[1:]}]({f})" for f in r.files)
            cited = ", ".join(f"`{c}`" for c in r.cited_in) or "-"
            command = f"`{r.command}`" if r.command else "-"
            lines.append(f"| `{r.name}` | {files} | {r.date or '-'} | {cited} | {command} |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    from shardplan.formats import write_text_atomic

    text = render(collect())
    write_text_atomic(INDEX, text)
    print(f"wrote {INDEX.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
