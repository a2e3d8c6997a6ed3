"""Transparent huge pages for every process that runs a model (glibc's `glibc.malloc.hugetlb=1`).

Glossary:
- THP: the kernel backs a 2 MiB-aligned range with one huge page instead of 512 small ones, so
  a forward that walks hundreds of MB (weights, KV cache, the interpreter's heap) misses the TLB
  far less often. Most kernels ship THP in `madvise` mode: only ranges a process marks get them.
- `glibc.malloc.hugetlb=1`: glibc's malloc marks its heap and its large allocations (torch's
  tensors among them) that way. glibc reads tunables once, at process start, so a process gets
  them from its environment: `specmesh` re-executes itself once with the tunable set, the local
  stack passes it to its services, and the Docker image sets it.

Measured on a 2-core Xeon (AMX, THP `madvise`), interleaved runs: in process 55.4 / 55.6 ->
56.5 / 56.5 tok/s without speculation and 96.4 / 94.7 -> 98.7 / 97.6 with eagle@4; through the
stack (every service with it) eagle@4 74.9 / 74.2 -> 76.5 / 78.2 tok/s. Marking only the weights
or only the KV cache gained nothing measurable: the gain comes from the heap as a whole.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

TUNABLE = "glibc.malloc.hugetlb"
THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def available() -> bool:
    """The kernel offers THP to processes that ask (`always` or `madvise` mode)."""
    try:
        mode = THP_MODE.read_text()
    except OSError:
        return False
    return "[always]" in mode or "[madvise]" in mode


def environment(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with the tunable added to GLIBC_TUNABLES, unless it already names it (set it to 0
    there to opt out)."""
    tunables = env.get("GLIBC_TUNABLES", "")
    if TUNABLE in tunables:
        return dict(env)
    return {**env, "GLIBC_TUNABLES": ":".join(t for t in (tunables, f"{TUNABLE}=1") if t)}


def reexec_with_huge_pages() -> None:
    """Replace this process with the same command line and the tunable set, once; a no-op where
    it is set already, where the kernel has no THP, or off Linux."""
    if not sys.platform.startswith("linux") or TUNABLE in os.environ.get("GLIBC_TUNABLES", "") or not available():
        return
    try:
        os.execve(sys.executable, sys.orig_argv, environment(os.environ))
    except OSError:
        return  # run on without: only slower
