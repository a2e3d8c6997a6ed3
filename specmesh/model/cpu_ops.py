"""The model's hot ops on CPU: the C kernels (kernels/) where they apply, torch elsewhere.

Every function takes and returns torch tensors and falls back to the torch op with the same
meaning, so the model code reads the same on any device.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from functools import lru_cache

import torch
import torch.nn.functional as F

from specmesh.model.kernels import library, native_bf16_flags
from specmesh.model.rope import apply_rotary

MAX_ATTENTION_QUERIES = 64  # prefill chunks go to torch's flash attention
FLOATS = (torch.float32, torch.bfloat16)


def _is_bf16(t: torch.Tensor) -> int:
    return int(t.dtype == torch.bfloat16)


def _kernels_for(*tensors: torch.Tensor):
    """The library, if every tensor is a contiguous fp32/bf16 CPU tensor that autograd does not
    track (the kernels have no backward; on the hot path: a plain loop, no generator)."""
    tracking = torch.is_grad_enabled()
    for t in tensors:
        if not (t.is_cpu and t.dtype in FLOATS and t.is_contiguous()) or (tracking and t.requires_grad):
            return None
    return library()


@lru_cache(maxsize=None)
def kernel_row_limit(dtype: torch.dtype, helped: bool = False) -> int:
    """Rows up to which linear.c's GEMMs beat torch's on this CPU (the default model's shapes,
    weights streamed from memory as in a forward): with AMX (where linear_amx.c does not take the
    shape), torch's bf16 tiles win from 5 rows and its fp32 GEMM at any size; with AVX-512 BF16
    alone, on two threads, torch catches up at about 64 rows, but against torch's one thread,
    linear_bf16_dot.c with the GEMM helper (`helped`: a drafter's process) stays ahead at any size
    (2-core Zen 4, the EAGLE head over a prompt's rows, caches evicted: 130 rows 5.7 against 8.2
    ms, 260 rows 11.3 against 17.4, 1040 rows 64 against 78); where torch emulates bf16, never."""
    native = native_bf16_flags()
    if "amx_bf16" in native:
        return 4 if dtype == torch.bfloat16 else 0
    if dtype == torch.bfloat16 and (helped or not native):
        return 1 << 62
    return 64


@lru_cache(maxsize=1)
def amx_ready() -> bool:
    """linear_amx.c can run here: the CPU has AMX and Linux granted this process the tile state."""
    lib = library()
    return lib is not None and "amx_bf16" in native_bf16_flags() and lib.specmesh_amx_ready() == 1


def vnni_packed(weight: torch.Tensor) -> torch.Tensor:
    """weight [N, K] in linear_amx.c's layout [N/16, K/2, 16, 2]; packed once and kept on the
    tensor (packed again if the weight changes in place; every call for an inference tensor,
    which cannot tell whether it changed)."""
    version = -1 if weight.is_inference() else weight._version  # inference tensors have no version counter
    packed_version, packed = getattr(weight, "_specmesh_vnni", (None, None))
    if packed_version != version or version < 0:
        n_out, n_in = weight.shape
        packed = weight.detach().view(n_out // 16, 16, n_in // 2, 2).transpose(1, 2).contiguous()
        weight._specmesh_vnni = (version, packed)
    return packed


def _amx_applies(x: torch.Tensor, weight: torch.Tensor) -> bool:
    n_out, n_in = weight.shape
    bf16 = x.dtype == weight.dtype == torch.bfloat16
    return bf16 and n_in % 32 == 0 and n_out % 16 == 0 and amx_ready()


_helper_running = False  # start_gemm_helper started the helper in this process


def start_gemm_helper() -> bool:
    """Starts kernels/helper.c's opportunistic helper thread for this process's GEMMs (AMX,
    AVX-512 BF16 or AVX2) where torch runs on one thread of several cores (a drafter beside its
    verifier): the GEMMs split their outputs with it whenever a core is free, and never wait for
    it when none is. Whether it runs."""
    global _helper_running
    alone = torch.get_num_threads() == 1 and (os.cpu_count() or 1) > 1
    _helper_running = alone and library() is not None and library().specmesh_helper_start() == 0
    return _helper_running


@contextmanager
def gemm_burst():
    """A stretch of GEMMs a few microseconds apart (a drafting step; usable as a decorator): the
    helper thread, if this process runs one, waits for them awake instead of asleep, yielding its
    core to any other thread that wants it, and sleeps again when the burst ends. The verifier's
    forward between two drafting steps evicts the drafter's weights from the caches: the step's
    GEMMs read them from memory, twice as fast on two cores (README "CPU kernels")."""
    if not _helper_running:
        yield
        return
    library().specmesh_helper_busy(1)
    try:
        yield
    finally:
        library().specmesh_helper_busy(0)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weight.T (+ bias): linear_amx.c for bf16 with AMX at any number of rows (it beats
    torch's oneDNN up to 256 rows and more), else linear.c up to `kernel_row_limit` rows, else torch."""
    rows, (n_out, n_in) = x.numel() // x.shape[-1], weight.shape
    lib = _kernels_for(x, weight)
    if lib is None or n_in % 8 or n_out % 2:
        return F.linear(x, weight, bias)
    out = torch.empty(*x.shape[:-1], n_out, dtype=x.dtype)
    if _amx_applies(x, weight):
        if lib.specmesh_linear_amx(x.data_ptr(), vnni_packed(weight).data_ptr(), out.data_ptr(), _is_bf16(out), rows, n_in, n_out):
            raise RuntimeError("specmesh_linear_amx refused a shape _amx_applies accepted")
    elif rows > kernel_row_limit(weight.dtype, _helper_running):
        return F.linear(x, weight, bias)
    elif lib.specmesh_linear(x.data_ptr(), _is_bf16(x), weight.data_ptr(), _is_bf16(weight),
                             out.data_ptr(), _is_bf16(out), rows, n_in, n_out) != 0:
        raise MemoryError("specmesh_linear: out of memory")
    return out + bias if bias is not None else out


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama RMSNorm: statistics in fp32, normalised value rounded to x's dtype, then weighted."""
    lib = _kernels_for(x, weight)
    if lib is None:
        return F.rms_norm(x, weight.shape, weight, eps)
    out = torch.empty_like(x)
    lib.specmesh_rms_norm(x.data_ptr(), _is_bf16(x), weight.data_ptr(), _is_bf16(weight), out.data_ptr(),
                          _is_bf16(out), x.numel() // x.shape[-1], x.shape[-1], eps)
    return out


def add_rms_norm(x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """A decoder layer's residual step and the norm after it: (x + delta, rms_norm(x + delta)), in
    one pass of rms_norm.c (the same bits as the two ops; torch's add where the kernels do not apply)."""
    lib = _kernels_for(x, delta, weight)
    if lib is None or x.dtype != delta.dtype:
        summed = x + delta
        return summed, rms_norm(summed, weight, eps)
    summed, out = torch.empty_like(x), torch.empty_like(x)
    lib.specmesh_add_rms_norm(x.data_ptr(), delta.data_ptr(), _is_bf16(x), weight.data_ptr(), _is_bf16(weight), summed.data_ptr(),
                              out.data_ptr(), x.numel() // x.shape[-1], x.shape[-1], eps)
    return summed, out


def tree_attention_applies(q: torch.Tensor) -> bool:
    """q [B, heads, T, head_dim]: few enough queries, and the kernels are there."""
    small = q.shape[2] <= MAX_ATTENTION_QUERIES and q.shape[-1] % 8 == 0 and q.shape[-1] <= 256
    return small and _kernels_for(q.contiguous()) is not None


def tree_attention(q, keys, values, slots, key_len: int, mask: torch.Tensor | None) -> torch.Tensor:
    """q [B, heads, T, head_dim]; keys/values [slots, kv_heads, max_len, head_dim] (one layer);
    mask [B, 1, T, L] bool or None -> [B, T, heads, head_dim]."""
    q = q.contiguous()
    bsz, heads, seq, dim = q.shape
    _, kv_heads, max_len, _ = keys.shape
    out = torch.empty(bsz, seq, heads, dim, dtype=q.dtype)
    mask_ptr = mask.contiguous().data_ptr() if mask is not None else None
    library().specmesh_attention(
        q.data_ptr(), keys.data_ptr(), values.data_ptr(), _is_bf16(q), slots.data_ptr(), mask_ptr,
        out.data_ptr(), bsz, heads, kv_heads, seq, dim, max_len, key_len, dim**-0.5,
    )
    return out


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up of a fused gate-up projection [..., 2 * inter] (gate half first) -> [..., inter]
    (kernels/silu_mul.c; torch's ops where the kernels do not apply)."""
    lib = _kernels_for(gate_up)
    if lib is None:
        gate, up = gate_up.chunk(2, dim=-1)
        return F.silu(gate) * up
    inter = gate_up.shape[-1] // 2
    out = torch.empty(*gate_up.shape[:-1], inter, dtype=gate_up.dtype)
    lib.specmesh_silu_mul(gate_up.data_ptr(), _is_bf16(gate_up), out.data_ptr(), gate_up.numel() // gate_up.shape[-1], inter)
    return out


def rotary_kv(qkv, cos, sin, slots, write_positions, keys, values, heads: int, kv_heads: int,
              start: tuple[int, int] | None = None) -> torch.Tensor:
    """One layer's RoPE fused with its KV-cache write (kernels/rotary_kv.c, the same bits as torch):
    qkv [B, T, (heads + 2 kv_heads) * head_dim], cos / signed sin [B, 1, T, head_dim]; the keys and
    values go into keys / values [slots, kv_heads, max_len, head_dim] of `slots` [B] at
    `write_positions` [B, T]. Returns the rotated queries [B, heads, T, head_dim]. `start` = (slot,
    first position) where the batch is one sequence whose positions follow each other: torch's path
    then writes a plain slice."""
    lib = _kernels_for(qkv, cos, sin, keys, values)
    if lib is None or len({qkv.dtype, cos.dtype, sin.dtype, keys.dtype, values.dtype}) > 1:
        return rotary_kv_torch(qkv, cos, sin, slots, write_positions, keys, values, heads, kv_heads, start)
    bsz, seq, _ = qkv.shape
    _, _, max_len, dim = keys.shape
    slots, write_positions = slots.contiguous(), write_positions.contiguous()
    queries = torch.empty(bsz, heads, seq, dim, dtype=qkv.dtype)
    lib.specmesh_rotary_kv(qkv.data_ptr(), cos.data_ptr(), sin.data_ptr(), _is_bf16(qkv), slots.data_ptr(),
                           write_positions.data_ptr(), queries.data_ptr(), keys.data_ptr(), values.data_ptr(),
                           bsz, seq, heads, kv_heads, dim, max_len)
    return queries


def rotary_kv_torch(qkv, cos, sin, slots, write_positions, keys, values, heads: int, kv_heads: int,
                    start: tuple[int, int] | None = None) -> torch.Tensor:
    """rotary_kv with torch's ops (any device; autograd sees it): q and k rotated together, k and v
    written into the slots."""
    bsz, seq, _ = qkv.shape
    dim = keys.shape[-1]
    qk_size = (heads + kv_heads) * dim
    qk = qkv[..., :qk_size].view(bsz, seq, -1, dim).transpose(1, 2)  # [B, heads + kv_heads, T, head_dim]
    q, k = apply_rotary(qk, cos, sin).split((heads, kv_heads), dim=1)
    v = qkv[..., qk_size:].view(bsz, seq, kv_heads, dim).transpose(1, 2)
    for cache, new in ((keys, k), (values, v)):
        if start is not None:
            slot, position = start
            cache[slot, :, position : position + seq] = new[0]
        else:
            cache[slots.unsqueeze(1).expand(bsz, seq), :, write_positions] = new.transpose(1, 2)
    return q


def _kernel_top(x: torch.Tensor, k: int) -> torch.Tensor | None:
    """topk.c's [rows, k] for a contiguous [rows, n] fp32/bf16 tensor; None where it does not
    apply (the kernel says so for a k out of its range) or a row holds a NaN."""
    lib = _kernels_for(x)
    if lib is None or x.dim() != 2 or k <= 0:
        return None
    out = torch.empty(x.shape[0], k, dtype=torch.int64)
    return out if lib.specmesh_topk(x.data_ptr(), _is_bf16(x), x.shape[0], x.shape[1], k, out.data_ptr()) == 0 else None


def row_argmax(x: torch.Tensor) -> list[int]:
    """Each row's index of its largest value, the first one on a tie (as torch.argmax): topk.c
    at k = 1, else torch.max (on CPU several times faster than torch.argmax). A verify step's bf16
    logits right after the LM head, 2-core Zen 4, medians of two runs side by side: 9 rows 228-230
    us against 303-500 us for torch.max, one row 141-159 against 192-198 us."""
    top = _kernel_top(x, 1)
    return top.view(-1).tolist() if top is not None else x.max(dim=-1).indices.tolist()


def top_indices(x: torch.Tensor, k: int) -> torch.Tensor:
    """[rows, k] CPU int64: each row's k largest values' indices, largest first: topk.c (the lower
    index first among equal values), else torch.topk (which orders ties as it likes). The same
    logits and runs, k = 8: 9 rows 158-222 us against 479-639 us for torch.topk, 17 rows 294-315
    against 990-1005 us, one row 126-161 against 206-289 us."""
    top = _kernel_top(x, k)
    return top if top is not None else torch.topk(x, k, dim=-1).indices.cpu()


class Linear(torch.nn.Linear):
    """nn.Linear whose forward goes through `linear` above."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
