"""Where specmesh keeps what it fetches: `SPECMESH_CACHE`, default `~/.cache/specmesh`."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"


def cache_dir() -> Path:
    return Path(os.environ.get("SPECMESH_CACHE", Path.home() / ".cache" / "specmesh")).expanduser()


def default_model_dir() -> Path:
    return cache_dir() / "models" / DEFAULT_MODEL_NAME
