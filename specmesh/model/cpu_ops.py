"""The model's hot ops on CPU: the C kernels (kernels/) where they apply, torch elsewhere.

Every function takes and returns torch tensors and falls back to the torch op with the same
meaning, so the model code reads the same on any device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from specmesh.model.kernels import library, native_bf16_flags

MAX_KERNEL_ROWS = 64  # beyond this torch's GEMM is as fast where it is native (fp32; bf16 on AVX-512 BF16)
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


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    rows, (n_out, n_in) = x.numel() // x.shape[-1], weight.shape
    lib = _kernels_for(x, weight)
    small_enough = rows <= MAX_KERNEL_ROWS or (weight.dtype == torch.bfloat16 and not native_bf16_flags())
    if lib is None or not small_enough or n_in % 8 or n_out % 2:
        return F.linear(x, weight, bias)
    out = torch.empty(*x.shape[:-1], n_out, dtype=x.dtype)
    if lib.specmesh_linear(x.data_ptr(), _is_bf16(x), weight.data_ptr(), _is_bf16(weight),
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


class Linear(torch.nn.Linear):
    """nn.Linear whose forward goes through `linear` above."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
