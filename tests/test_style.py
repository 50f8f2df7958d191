"""House style the next engineer can rely on: Python lines fit a 120-column editor, and the CLI documents itself."""

from conftest import ROOT


def test_python_lines_fit_in_120_columns() -> None:
    files = sorted(p for folder in ("shardplan", "tests", "bench", "scripts") for p in (ROOT / folder).rglob("*.py"))
    long = [f"{path.relative_to(ROOT)}:{i}" for path in files
            for i, line in enumerate(path.read_text().splitlines(), 1) if len(line) > 120]
    assert files and long == []


def test_every_command_line_argument_says_what_it_is() -> None:
    """`shardplan COMMAND --help` is the CLI's manual: no argument is left without a line in it."""
    import argparse

    from shardplan.cli import build_parser

    def silent(parser: argparse.ArgumentParser, path: str) -> list[str]:
        out = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    out += silent(sub, f"{path} {name}")
            elif not action.help and not isinstance(action, argparse._HelpAction):
                out.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
        return out

    assert silent(build_parser(), "shardplan") == []
