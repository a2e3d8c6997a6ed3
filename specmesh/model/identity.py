"""A model's identity across services: verifiers, drafters and the recycling table of one
model must agree on it. Directory name + a hash of config.json."""

from __future__ import annotations

import hashlib
from pathlib import Path


def model_id(path: Path) -> str:
    digest = hashlib.sha256((path / "config.json").read_bytes()).hexdigest()[:12]
    return f"{path.name}-{digest}"
