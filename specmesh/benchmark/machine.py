"""The machine and the code a benchmark ran on, for its report: results from CPUs with and without
native bf16 matmuls (AMX, AVX-512 BF16) are not comparable, nor are those of two CPU generations
of one vendor, so the name says which CPU (family and model) and which bf16 it has; the commit
says which code."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import specmesh
from specmesh.model.kernels import native_bf16_flags

CHECKOUT = Path(specmesh.__file__).resolve().parent.parent  # a git checkout when run from source


def cpu_name() -> str:
    """E.g. "AMD EPYC (CPU family 25, model 17), AVX-512 BF16" or "Intel(R) Xeon(R) Processor
    (CPU family 6, model 143), AMX"."""
    fields = _cpuinfo()
    name = fields.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in fields and "model" in fields:
        name += f" (CPU family {fields['cpu family']}, model {fields['model']})"
    native = native_bf16_flags()
    bf16 = "AMX" if "amx_bf16" in native else "AVX-512 BF16" if native else "no native bf16"
    return f"{name}, {bf16}"


def code_version(checkout: Path = CHECKOUT) -> str:
    """The commit the code runs from ("cc445a0", or "cc445a0 with uncommitted changes" where files
    other than results and markdown differ from it), or the package's version where it is not a
    git checkout."""
    try:
        if Path(_git(checkout, "rev-parse", "--show-toplevel")).resolve() != checkout.resolve():
            raise FileNotFoundError(checkout)  # an installed copy inside some other repository
        commit = _git(checkout, "rev-parse", "--short", "HEAD")
        changed = _git(checkout, "status", "--porcelain", "--untracked-files=no", "--", ".",
                       ":(exclude)bench", ":(exclude)*.md")  # results and notes are not code
    except (OSError, subprocess.SubprocessError):
        return f"specmesh {specmesh.__version__}"
    return f"{commit} with uncommitted changes" if changed else commit


def _git(checkout: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True,
                          check=True, timeout=10).stdout.strip()


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (empty where there is none)."""
    fields: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return fields
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields
