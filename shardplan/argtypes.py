"""Argument types shared by the command line and the bench scripts."""
from __future__ import annotations

import argparse


def at_least(lo: float, kind: type = int, hi: float | None = None):
    """An argparse ``type``: a number of ``kind`` within ``lo``..``hi``. A value outside is refused by
    argparse itself, which names the flag and exits 2 before anything runs or is written."""
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {'an integer' if kind is int else 'a number'}, "
                                             f"got {text!r}") from None
        if not lo <= v <= (hi if hi is not None else v):
            bound = f"within {lo}..{hi}" if hi is not None else f"at least {lo}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {text}")
        return v

    return parse
