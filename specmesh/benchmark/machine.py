"""The machine a benchmark ran on, for its report: results from CPUs with and without native bf16
matmuls (AMX, AVX-512 BF16) are not comparable, so the name says which it has."""

from __future__ import annotations

import platform
from pathlib import Path

from specmesh.model.kernels import native_bf16_flags


def cpu_name() -> str:
    """E.g. "AMD EPYC, no native bf16" or "Intel(R) Xeon(R) Processor, AMX"."""
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        return name
    native = native_bf16_flags()
    bf16 = "AMX" if "amx_bf16" in native else "AVX-512 BF16" if native else "no native bf16"
    return f"{name}, {bf16}"
