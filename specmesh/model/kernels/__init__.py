"""CPU kernels in C for the verifier's small forwards: linear.c (AVX2 + FMA; linear_bf16_dot.c
with AVX-512 BF16 dot products where the CPU has them), rms_norm.c, attention.c (tree attention;
attention_bf16_dot.c with AVX-512 BF16 dot products where the CPU has them but no AMX), rotary_kv.c
(RoPE fused with the KV-cache write), silu_mul.c (the MLP's gate), topk.c (greedy verification's
target tokens and the token-recycling rows) and helper.c (a one-thread
process's GEMM helper thread), compiled once
with the system C compiler into the cache directory and loaded with ctypes (they share torch's
OpenMP runtime).

They are used on x86 CPUs with AVX2 and FMA: torch's GEMMs are slow at a few rows (its bf16 ones
emulated without AVX-512 BF16; with it, on AMD Zen 4, a one-token forward twice as slow as with
these; with AMX, 1.9x as slow as with linear_amx.c), and its attention with a tree mask is slower than attention.c.
`cpu_ops.kernel_row_limit` says up to how many rows our GEMMs take a linear on this CPU. Without
a compiler or AVX2/FMA, torch does the work.
SPECMESH_CPU_KERNELS=0 turns them off, =1 forces them on.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

from specmesh.paths import cache_dir

log = logging.getLogger(__name__)

SOURCES = tuple(Path(__file__).parent / name for name in ("linear.c", "linear_bf16_dot.c", "linear_amx.c", "rms_norm.c", "attention.c", "attention_bf16_dot.c", "rotary_kv.c", "silu_mul.c", "topk.c", "helper.c"))
HEADERS = tuple(Path(__file__).parent / name for name in ("common.h", "amx.h", "attention.h", "helper.h"))
_ptr, _i64, _int = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
SIGNATURES = {
    "specmesh_linear": ([_ptr, _int, _ptr, _int, _ptr, _int, _i64, _i64, _i64], ctypes.c_int),
    "specmesh_linear_amx": ([_ptr, _ptr, _ptr, _int, _i64, _i64, _i64], ctypes.c_int),
    "specmesh_amx_ready": ([], ctypes.c_int),
    "specmesh_helper_start": ([], ctypes.c_int),
    "specmesh_helper_chunks": ([], ctypes.c_int64),
    "specmesh_helper_busy": ([_int], None),
    "specmesh_rms_norm": ([_ptr, _int, _ptr, _int, _ptr, _int, _i64, _i64, ctypes.c_float], None),
    "specmesh_add_rms_norm": ([_ptr, _ptr, _int, _ptr, _int, _ptr, _ptr, _i64, _i64, ctypes.c_float], None),
    "specmesh_attention": (
        [_ptr, _ptr, _ptr, _int, _ptr, _ptr, _ptr] + [_i64] * 7 + [ctypes.c_float], None,
    ),
    "specmesh_rotary_kv": ([_ptr, _ptr, _ptr, _int, _ptr, _ptr, _ptr, _ptr, _ptr] + [_i64] * 6, None),
    "specmesh_silu_mul": ([_ptr, _int, _ptr, _i64, _i64], None),
    "specmesh_topk": ([_ptr, _int, _i64, _i64, _int, _ptr], ctypes.c_int),
}


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


@lru_cache(maxsize=1)
def native_bf16_flags() -> frozenset[str]:
    """This CPU's native bf16 matmul extensions (AMX, AVX-512 BF16); empty where torch emulates bf16."""
    return frozenset({"amx_bf16", "avx512_bf16"} & cpu_flags())


def _wanted() -> bool:
    setting = os.environ.get("SPECMESH_CPU_KERNELS", "auto")
    if setting in ("0", "1"):
        return setting == "1"
    return {"avx2", "fma"} <= cpu_flags()


def _build(target: Path) -> bool:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.tmp")
    cmd = [os.environ.get("CC", "cc"), "-O3", "-mavx2", "-mfma", "-fopenmp", "-shared", "-fPIC",
           "-o", str(partial), *map(str, SOURCES)]
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    except OSError as error:
        log.warning("no C compiler (%s): torch does the CPU kernels' work, several times slower", error)
        return False
    except subprocess.CalledProcessError as error:
        log.warning("the CPU kernels did not compile: torch does their work, several times slower\n%s", error.stderr[-2000:])
        return False
    partial.rename(target)
    return True


@lru_cache(maxsize=1)
def library() -> ctypes.CDLL | None:
    """The compiled kernels, or None where they do not apply."""
    if sys.platform != "linux" or not _wanted():
        return None
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in (*SOURCES, *HEADERS))).hexdigest()[:12]
    target = cache_dir() / "kernels" / f"specmesh-cpu-{digest}.so"
    if not target.exists() and not _build(target):
        return None
    lib = ctypes.CDLL(str(target))
    for name, (args, result) in SIGNATURES.items():
        getattr(lib, name).argtypes = args
        getattr(lib, name).restype = result
    return lib
