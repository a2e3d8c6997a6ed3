"""argparse types shared by the `specmesh` CLI and the services' command lines."""

from __future__ import annotations

import argparse


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value
