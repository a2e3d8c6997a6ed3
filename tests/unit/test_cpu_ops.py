"""The C kernels against torch's own ops (the oracle), in fp32 and bf16."""

import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from specmesh.model import cpu_ops
from specmesh.model.kernels import cpu_flags, library, native_bf16_flags

pytestmark = pytest.mark.skipif(library() is None, reason="CPU kernels do not apply on this machine")
GEN = torch.Generator().manual_seed(0)


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=GEN).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 2, 5, 6, 7, 13, 40])
def test_linear_matches_torch(dtype, rows):
    x, w, b = randn(rows, 96, dtype=dtype), randn(34, 96, dtype=dtype), randn(34, dtype=dtype)
    out = cpu_ops.linear(x.view(1, rows, 96), w, b)
    expected = F.linear(x.float(), w.float(), b.float())
    assert out.dtype == dtype and out.shape == (1, rows, 34)
    tolerance = 1e-4 if dtype == torch.float32 else 0.08  # bf16 rounds the output (and the bias add)
    torch.testing.assert_close(out[0].float(), expected, atol=tolerance, rtol=0.01 if dtype == torch.bfloat16 else 0)


@pytest.mark.skipif("avx512_bf16" not in cpu_flags(), reason="no AVX-512 BF16 on this CPU")
def test_bf16_dot_products_match_fp32_and_do_not_depend_on_the_batch():
    """bf16 x and w go through VDPBF16PS (linear_bf16_dot.c): exact products, fp32 sums. K = 72
    leaves a partial 32-wide block; N = 100 has tiles that prefetch rows ahead and tiles near
    the end that do not; every row's result is the same alone or among 13 rows."""
    rows, K, N = 13, 72, 100
    x, w = randn(rows, K, dtype=torch.bfloat16), randn(N, K, dtype=torch.bfloat16)

    def fp32_out(x):
        y = torch.empty(x.shape[0], N)
        assert library().specmesh_linear(x.data_ptr(), 1, w.data_ptr(), 1, y.data_ptr(), 0, x.shape[0], K, N) == 0
        return y

    together = fp32_out(x)
    expected = (x.double() @ w.double().T).float()
    torch.testing.assert_close(together, expected, atol=1e-4, rtol=0)
    for i in (0, 6, 12):
        assert torch.equal(fp32_out(x[i : i + 1].clone()), together[i : i + 1])


@pytest.mark.skipif(not cpu_ops.amx_ready(), reason="no AMX on this CPU")
def test_amx_tiles_match_fp32_and_do_not_depend_on_the_batch():
    """bf16 x and w go through AMX tiles (linear_amx.c) from packed weights: fp32 sums of exact
    products. 21 rows span two 16-row tiles and 80 outputs a group of 4 blocks and one of 1;
    every row's result is the same alone or among the 21; a weight changed in place is packed
    again, an inference tensor (no version counter) every time."""
    rows, K, N = 21, 96, 80
    x, w = randn(rows, K, dtype=torch.bfloat16), randn(N, K, dtype=torch.bfloat16)
    expected = (x.double() @ w.double().T).float()

    def fp32_out(x):
        y = torch.empty(x.shape[0], N)
        packed = cpu_ops.vnni_packed(w)
        assert library().specmesh_linear_amx(x.data_ptr(), packed.data_ptr(), y.data_ptr(), 0, x.shape[0], K, N) == 0
        return y

    amx = fp32_out(x)
    torch.testing.assert_close(amx, expected, atol=1e-4, rtol=0)
    for i in (0, 15, 16, 20):
        assert torch.equal(fp32_out(x[i : i + 1].clone()), amx[i : i + 1])
    bf16 = cpu_ops.linear(x, w)
    assert torch.equal(bf16, amx.bfloat16())
    w.mul_(2)
    assert torch.equal(cpu_ops.linear(x, w), (2 * amx).bfloat16())
    with torch.inference_mode():  # no version counter: packed on every call
        w_inference = w.clone()
        assert torch.equal(cpu_ops.linear(x, w_inference), (2 * amx).bfloat16())
        w_inference.mul_(2)
        assert torch.equal(cpu_ops.linear(x, w_inference), (4 * amx).bfloat16())


def test_linear_falls_back_where_the_kernel_does_not_apply():
    x, w = randn(3, 10), randn(6, 10)  # 10 inputs: not a multiple of 8
    torch.testing.assert_close(cpu_ops.linear(x, w), F.linear(x, w))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_matches_the_hugging_face_formula(dtype):
    x, w = randn(2, 5, 64, dtype=dtype), randn(64, dtype=dtype)
    xf = x.float()
    expected = w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(dtype)
    torch.testing.assert_close(cpu_ops.rms_norm(x, w, 1e-5), expected, atol=1e-5 if dtype == torch.float32 else 0.02, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 9])
def test_add_rms_norm_gives_the_bits_of_the_add_then_the_norm(dtype, rows):
    """The residual add fused into the norm after it (9 rows take the parallel path)."""
    x, delta, w = randn(1, rows, 96, dtype=dtype), randn(1, rows, 96, dtype=dtype), randn(96, dtype=dtype)
    summed, normed = cpu_ops.add_rms_norm(x, delta, w, 1e-5)
    assert torch.equal(summed, x + delta)
    assert torch.equal(normed, cpu_ops.rms_norm(x + delta, w, 1e-5))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tree_attention_matches_sdpa(dtype):
    """3 sequences in slots 2, 0, 3 with random visibility masks; 6 query heads on 2 KV heads."""
    bsz, heads, kv_heads, seq, dim, max_len, key_len = 3, 6, 2, 5, 16, 40, 29
    q = randn(bsz, heads, seq, dim, dtype=dtype)
    keys, values = randn(4, kv_heads, max_len, dim, dtype=dtype), randn(4, kv_heads, max_len, dim, dtype=dtype)
    slots = torch.tensor([2, 0, 3])
    mask = torch.rand(bsz, 1, seq, key_len, generator=GEN) < 0.6
    mask[..., 0] = True  # every query sees at least one key
    out = cpu_ops.tree_attention(q, keys, values, slots, key_len, mask)
    k_all, v_all = keys[slots, :, :key_len], values[slots, :, :key_len]
    expected = F.scaled_dot_product_attention(q.float(), k_all.float(), v_all.float(), attn_mask=mask, enable_gqa=True)
    tolerance = 1e-5 if dtype == torch.float32 else 0.02
    torch.testing.assert_close(out.float(), expected.transpose(1, 2), atol=tolerance, rtol=0)
    no_mask = cpu_ops.tree_attention(q[:1, :, :1], keys, values, slots[:1], key_len, None)
    expected = F.scaled_dot_product_attention(q[:1, :, :1].float(), k_all[:1].float(), v_all[:1].float(), enable_gqa=True)
    torch.testing.assert_close(no_mask.float(), expected.transpose(1, 2), atol=tolerance, rtol=0)


def check_tree_rows_as_alone(dtype, heads: int, kv_heads: int, dim: int, max_len: int, key_len: int, tolerance: float):
    """2 sequences x 6 tree rows with random visibility: the batch matches SDPA within
    `tolerance`, and every query's output is the same bits alone (one sequence, one row) as in
    the batch."""
    bsz, seq = 2, 6
    q = randn(bsz, heads, seq, dim, dtype=dtype)
    keys, values = randn(3, kv_heads, max_len, dim, dtype=dtype), randn(3, kv_heads, max_len, dim, dtype=dtype)
    slots = torch.tensor([2, 0])
    mask = torch.rand(bsz, 1, seq, key_len, generator=GEN) < 0.6
    mask[..., 0] = True
    out = cpu_ops.tree_attention(q, keys, values, slots, key_len, mask)
    k_all, v_all = keys[slots, :, :key_len], values[slots, :, :key_len]
    expected = F.scaled_dot_product_attention(q.float(), k_all.float(), v_all.float(), attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(out.float(), expected.transpose(1, 2), atol=tolerance, rtol=0)
    for b in range(bsz):
        for t in range(seq):
            alone = cpu_ops.tree_attention(q[b : b + 1, :, t : t + 1], keys, values, slots[b : b + 1], key_len, mask[b : b + 1, :, t : t + 1])
            assert torch.equal(alone[0, 0], out[b, t])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("heads, kv_heads, dim", [(9, 3, 64), (8, 2, 24)])
def test_tree_attention_gives_each_query_the_bits_it_gets_alone(dtype, heads, kv_heads, dim):
    """A tree's rows (GQA groups of 3 and 4 heads) give every query the same bits as decoding it
    alone: what lets a verified tree equal plain decoding token for token. On CPUs with AMX bf16
    takes the tile path (the test below covers it further); a head dim of 24 weighs the values in
    a part-filled pass."""
    check_tree_rows_as_alone(dtype, heads, kv_heads, dim, 40, 37, 1e-5 if dtype == torch.float32 else 0.02)


@pytest.mark.skipif(not native_bf16_flags(), reason="the bf16 scores by tiles or dot products need AMX or AVX-512 BF16")
@pytest.mark.parametrize("max_len, key_len, dim", [(40, 37, 64), (30, 25, 64), (40, 33, 96), (13, 13, 64), (32, 32, 64)])
def test_native_bf16_tree_attention_matches_sdpa_and_each_query_alone(max_len, key_len, dim):
    """bf16 with AMX or AVX-512 BF16, 9 heads on 3 KV heads (of 64 dims as the default model's, and 96):
    scores by tile products (AMX) or by dot products of 16 keys at a time (AVX-512 BF16), keys up
    to the end of the cache (a lone last tile or block, the second tile of a pair, a cache filled to
    its end, zero-padded or rescored); every query's output is the same bits alone as in the batch
    of 2 sequences x 6 tree rows (AMX: scored in blocks of 5 positions x 3 heads and 1 position, the
    short block padded); a head dim of 96 weighs the values 64 dims and then 32 at a time."""
    check_tree_rows_as_alone(torch.bfloat16, 9, 3, dim, max_len, key_len, 0.02)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows, inter", [(1, 64), (5, 1536), (70, 36)])
def test_silu_mul_matches_torch(dtype, rows, inter):
    """The MLP's gate from a fused gate-up row (70 rows take the parallel path; 36 leaves a tail
    of 4 after the 8-wide blocks): torch's F.silu(gate) * up, up to the last bit of fp32 exp
    (in bf16, where silu is rounded before the product, at most one bf16 step apart)."""
    gate_up = randn(1, rows, 2 * inter, dtype=dtype) * 4
    out = cpu_ops.silu_mul(gate_up)
    gate, up = gate_up.chunk(2, dim=-1)
    expected = F.silu(gate) * up
    assert out.shape == expected.shape and out.dtype == dtype
    if dtype == torch.float32:
        torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-6)
    else:
        torch.testing.assert_close(out.float(), expected.float(), atol=1e-2, rtol=2 ** -7)
        assert (out == expected).float().mean() > 0.99


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bsz, seq", [(1, 1), (2, 5), (3, 30)])
@pytest.mark.parametrize("dim", [16, 12])
def test_rotary_kv_gives_torchs_bits(dtype, bsz, seq, dim):
    """RoPE fused with the KV write: the same queries and cache contents, bit for bit, as torch's
    rotation and slot writes (sequences in slots 3, 0, 2 at different lengths; 30 tokens take the
    kernel's parallel path; head_dim 16 its 8-wide path, 12 its one-at-a-time path); cache
    entries the batch does not write stay as they were."""
    from specmesh.model.config import ModelConfig
    from specmesh.model.rope import RotaryTables

    config = ModelConfig.from_hf_dict({"vocab_size": 32, "hidden_size": 6 * dim, "intermediate_size": 64, "num_hidden_layers": 1,
                                       "num_attention_heads": 6, "num_key_value_heads": 2, "rms_norm_eps": 1e-5,
                                       "max_position_embeddings": 256})
    rotary = RotaryTables(config, 256, torch.device("cpu"))
    slots = torch.tensor([3, 0, 2][:bsz])
    write_positions = torch.tensor([7, 0, 40][:bsz]).unsqueeze(1) + torch.arange(seq)
    positions = write_positions + torch.randint(0, 3, (bsz, seq), generator=GEN)  # tree depths need not follow the writes
    start = (int(slots[0]), int(write_positions[0, 0])) if bsz == 1 else None  # the runner's plain-slice case
    qkv = randn(bsz, seq, (6 + 2 * 2) * dim, dtype=dtype)
    cos, sin = rotary.gather(positions, dtype)
    cache = [randn(4, 2, 80, dim, dtype=dtype) for _ in range(2)]
    expected_cache = [c.clone() for c in cache]
    expected_q = cpu_ops.rotary_kv_torch(qkv, cos, sin, slots, write_positions, *expected_cache, 6, 2, start)
    q = cpu_ops.rotary_kv(qkv, cos, sin, slots, write_positions, *cache, heads=6, kv_heads=2)
    assert q.shape == (bsz, 6, seq, dim) and q.is_contiguous()
    assert torch.equal(q, expected_q)
    assert torch.equal(cache[0], expected_cache[0]) and torch.equal(cache[1], expected_cache[1])


def test_runner_gives_the_same_logits_with_and_without_kernels(tiny_model_dir, monkeypatch):
    from specmesh.model.loading import RunnerConfig, load_runner
    from specmesh.model.runner import ForwardItem
    from specmesh.tree import DraftTree

    runner, _, _ = load_runner(RunnerConfig(model=str(tiny_model_dir), dtype="float32", num_slots=2, max_context=64, max_forward_tokens=32))
    tree = DraftTree((5, 6, 7, 8), (-1, -1, 0, 1))

    def logits() -> torch.Tensor:
        slot = runner.allocate_slot()
        runner.forward([ForwardItem(slot, list(range(20)), logits="none")])
        runner.commit(slot, range(20))
        (out,) = runner.forward([ForwardItem(slot, (1, *tree.tokens), tree.topology.depths, tree.topology.ancestor_mask)])
        runner.release_slot(slot)
        return out.logits

    with_kernels = logits()
    monkeypatch.setattr(cpu_ops, "library", lambda: None)
    torch.testing.assert_close(with_kernels, logits(), atol=1e-4, rtol=0)


def test_speculation_is_bitwise_lossless_in_bf16(tiny_model_dir):
    """With the kernels, every op is batch- and layout-invariant, so verifying a tree gives
    exactly what plain decoding gives, even in bf16 where ties and rounding are everywhere."""
    from specmesh.engine import Engine

    plain = Engine.from_pretrained(str(tiny_model_dir), drafter="none", dtype="bfloat16", budget=0, max_context=128)
    prompts = [[3, 1, 4, 1, 5], [9, 2, 6, 5, 3, 5, 8, 9, 7], [2, 7, 1, 8, 2, 8]]
    expected = [plain.generate(ids, max_new_tokens=60).token_ids for ids in prompts]
    for drafter, budget in (("recycling", 16), ("ngram", 8)):
        engine = plain.with_drafter(drafter, budget)
        for _ in range(2):
            assert [engine.generate(ids, max_new_tokens=60).token_ids for ids in prompts] == expected


def test_the_kernels_step_aside_for_autograd():
    """Training (the EAGLE head) goes through the same Linear: with gradients wanted, torch does
    the work, so the backward pass exists and matches."""
    x, w = randn(5, 96).requires_grad_(), randn(34, 96).requires_grad_()
    cpu_ops.linear(x, w).square().sum().backward()
    expected_x, expected_w = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    F.linear(expected_x, expected_w).square().sum().backward()
    torch.testing.assert_close(x.grad, expected_x.grad)
    torch.testing.assert_close(w.grad, expected_w.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_eagle_head_and_draft_logits_match_the_torch_ops(tiny_model_dir, dtype, monkeypatch):
    import json

    from specmesh.eagle.head import EagleHead, head_config_dict
    from specmesh.eagle.target_io import TargetIO

    torch.manual_seed(0)
    head = EagleHead(head_config_dict(json.loads((tiny_model_dir / "config.json").read_text()))).to(dtype)
    io = TargetIO.from_checkpoint(tiny_model_dir, dtype)
    features, tokens = randn(1, 7, 64, dtype=dtype), torch.tensor([[3, 1, 4, 1, 5, 9, 2]])

    @torch.inference_mode()
    def draft_logits():
        out, kv = head(features, io.embed(tokens), torch.arange(7)[None])
        return io.logits(out), kv.valid()[0]

    with_kernels = draft_logits()
    monkeypatch.setattr(cpu_ops, "library", lambda: None)
    tolerance = 1e-4 if dtype == torch.float32 else 0.1
    for got, expected in zip(with_kernels, draft_logits()):
        torch.testing.assert_close(got.float(), expected.float(), atol=tolerance, rtol=0.02 if dtype == torch.bfloat16 else 0)


GEMM_HELPER_CHECK = """
import os, torch
from specmesh.model import cpu_ops
from specmesh.model.kernels import library
torch.set_num_threads(1)
gen = torch.Generator().manual_seed(0)
shapes = [(1, 576, 8192), (4, 576, 3072), (17, 576, 960), (40, 96, 80)]
cases = [(torch.randn(r, k, generator=gen).bfloat16(), torch.randn(n, k, generator=gen).bfloat16()) for r, k, n in shapes]
cases += [(x.float(), w.float()) for x, w in cases[1:3]]  # linear.c's fp32 GEMM takes the helper too (not with AMX: torch's)
alone = [cpu_ops.linear(x, w) for x, w in cases]
assert cpu_ops.start_gemm_helper() == (os.cpu_count() > 1)  # a helper needs a second core
for _ in range(200):
    for (x, w), expected in zip(cases, alone):
        assert torch.equal(cpu_ops.linear(x, w), expected)
prompt_rows = torch.randn(200, 576, generator=gen).bfloat16(), torch.randn(1536, 576, generator=gen).bfloat16()
before = library().specmesh_helper_chunks()
with cpu_ops.gemm_burst():  # an EAGLE start: a prompt's rows go to our GEMM and its helper too, not torch's one thread
    for _ in range(5):
        got = cpu_ops.linear(*prompt_rows)
torch.testing.assert_close(got.float(), torch.nn.functional.linear(*prompt_rows).float(), atol=0.1, rtol=0.02)
assert library().specmesh_helper_chunks() > before or os.cpu_count() == 1, "a prompt's rows went to torch"
helped = library().specmesh_helper_chunks()
assert helped > 0 or os.cpu_count() == 1, "the helper never took a chunk"
torch.set_num_threads(2)  # OpenMP splits the work: the helper stands aside
for (x, w), expected in zip(cases, alone):
    assert torch.equal(cpu_ops.linear(x, w), expected)
assert library().specmesh_helper_chunks() == helped
print("ok", helped)
"""


@pytest.mark.skipif(library() is None, reason="the GEMM helper serves the C kernels' GEMMs")
def test_the_gemm_helper_gives_the_same_bits_and_stands_aside_for_openmp():
    """A one-thread process with kernels/helper.c's helper (a drafter beside its verifier): its
    GEMMs (AMX tiles, VDPBF16PS without AMX, AVX2 FMAs without either; bf16 and fp32) split their
    output blocks with the helper (it
    took some of them, over 800 calls a few microseconds apart) and give the bits of the GEMM
    alone, at a prompt's rows too (where torch's one thread is slower); with two OpenMP threads
    the helper takes none. In a subprocess: the helper lives as
    long as its process."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", GEMM_HELPER_CHECK], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok")


GEMM_BURST_CHECK = """
import os, time, torch
from specmesh.model import cpu_ops
torch.set_num_threads(1)
def cpu_ns(tid):
    return int(open(f"/proc/self/task/{tid}/schedstat").read().split()[0])
before = set(os.listdir("/proc/self/task"))
assert cpu_ops.start_gemm_helper()
helper, = set(os.listdir("/proc/self/task")) - before
def burnt_while(seconds):
    start = cpu_ns(helper)
    time.sleep(seconds)
    return (cpu_ns(helper) - start) / 1e6
x, w = torch.randn(4, 576).bfloat16(), torch.randn(8192, 576).bfloat16()
expected = cpu_ops.linear(x, w)
with cpu_ops.gemm_burst():
    awake = burnt_while(0.2)
    assert all(torch.equal(cpu_ops.linear(x, w), expected) for _ in range(100))
asleep = burnt_while(0.2)
print("ok", awake, asleep)
assert awake > 5 and asleep < 2, (awake, asleep)
"""


@pytest.mark.skipif(library() is None or (os.cpu_count() or 1) < 2 or not Path("/proc/self/task").exists(),
                    reason="the GEMM helper runs beside a one-thread process's GEMMs, on a second core")
def test_the_gemm_helper_waits_awake_through_a_burst_and_sleeps_after_it():
    """kernels/helper.c in a burst (cpu_ops.gemm_burst, a drafting step): woken at its start, the
    helper waits for the next GEMM awake (its thread takes CPU time while the caller sleeps), the
    GEMMs give the same bits, and once the burst ends it sleeps (no CPU time)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", GEMM_BURST_CHECK], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout
    assert done.stdout.startswith("ok")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_top_indices_are_the_largest_values_lower_index_first_on_ties(dtype):
    """kernels/topk.c (the token-recycling rows of a verify step): each row's k largest values'
    indices, largest first, equal values in index order (a stable descending sort's first k),
    whatever the row's length against the vector width; a row with a NaN goes to torch.topk."""
    gen = torch.Generator().manual_seed(5)
    for n, k in ((49152, 8), (1003, 8), (13, 8), (8, 8), (100, 1)):
        x = (torch.randn(9, n, generator=gen) * 3).round().to(dtype)  # integer values: many ties
        expected = torch.sort(x.float(), dim=-1, descending=True, stable=True).indices[:, :k]
        assert torch.equal(cpu_ops.top_indices(x, k), expected)
    x = torch.randn(3, 100, generator=gen).to(dtype)
    x[1, 7] = float("nan")
    assert torch.equal(cpu_ops.top_indices(x, 4), torch.topk(x, 4, dim=-1).indices)
