"""Argument types shared by the command line and the bench scripts."""
from __future__ import annotations

import argparse

from .errors import InputError


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


def int_list(flag: str, text: str) -> tuple[int, ...]:
    """A comma-separated list of integers given on the command line; else an error naming ``flag``."""
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise InputError(flag, f"must be comma-separated integers, got {text!r}", "e.g. 2,4,8") from None
