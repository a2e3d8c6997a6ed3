/* Rotary position embedding (RoPE, Su et al. 2021) of one layer's queries and keys, fused with
 * the KV-cache write: from the layer's qkv projection [B, T, (H + 2 KVH) * D] and the batch's cos
 * and signed sin [B, T, D] (rotate_half's sign folded into sin), writes the rotated queries as
 * [B, H, T, D], and the rotated keys and the values into the cache slots [slots, KVH, max_len, D]
 * at each token's write position. Every value is rounded as torch rounds
 * x * cos + roll(x, D / 2) * signed_sin in the activation dtype (each product and the sum on its
 * own, no fused multiply-add), so a forward gives the same bits with or without this kernel. */
#include "common.h"

/* One head's row of `dim` values, rotated (rotate = 1) or copied; 8 at a time where the row's
 * halves are whole blocks of 8, one at a time elsewhere. Products and sum are separate roundings:
 * no contraction into fused multiply-adds here. */
__attribute__((optimize("fp-contract=off")))
static void rotate_row(const void *src, int64_t src_at, const void *cos, const void *sin, int64_t angle_at,
                       void *dst, int64_t dst_at, int is_bf16, int64_t dim, int rotate) {
    int64_t half = dim / 2, i = 0;
    if (half % 8 == 0) {
        for (; i < dim; i += 8) {
            __m256 x = load_any(src, is_bf16, src_at + i);
            if (rotate) {
                __m256 partner = load_any(src, is_bf16, src_at + (i + half) % dim);
                __m256 straight = _mm256_mul_ps(x, load_any(cos, is_bf16, angle_at + i));
                __m256 turned = _mm256_mul_ps(partner, load_any(sin, is_bf16, angle_at + i));
                if (is_bf16) {
                    straight = round_bf16(straight);
                    turned = round_bf16(turned);
                }
                x = _mm256_add_ps(straight, turned);
            }
            store_any(dst, is_bf16, dst_at + i, x);
        }
    }
    for (; i < dim; i++) {
        float x = load_value(src, is_bf16, src_at + i);
        if (rotate) {
            float straight = x * load_value(cos, is_bf16, angle_at + i);
            float turned = load_value(src, is_bf16, src_at + (i + half) % dim) * load_value(sin, is_bf16, angle_at + i);
            if (is_bf16) {
                straight = bf16_rounded(straight);
                turned = bf16_rounded(turned);
            }
            x = straight + turned;
        }
        store_value(dst, is_bf16, dst_at + i, x);
    }
}

void specmesh_rotary_kv(const void *qkv, const void *cos, const void *sin, int is_bf16, const int64_t *slots,
                        const int64_t *write_positions, void *queries, void *keys, void *values, int64_t batch,
                        int64_t tokens, int64_t heads, int64_t kv_heads, int64_t dim, int64_t max_len) {
    int64_t row_heads = heads + 2 * kv_heads;
#pragma omp parallel for schedule(static) if (batch * tokens > 64)
    for (int64_t bt = 0; bt < batch * tokens; bt++) {
        int64_t b = bt / tokens, t = bt % tokens;
        int64_t row = bt * row_heads * dim, angle = bt * dim;
        for (int64_t h = 0; h < heads; h++)
            rotate_row(qkv, row + h * dim, cos, sin, angle, queries, ((b * heads + h) * tokens + t) * dim, is_bf16, dim, 1);
        for (int64_t h = 0; h < kv_heads; h++) {
            int64_t at = ((slots[b] * kv_heads + h) * max_len + write_positions[bt]) * dim;
            rotate_row(qkv, row + (heads + h) * dim, cos, sin, angle, keys, at, is_bf16, dim, 1);
            rotate_row(qkv, row + (heads + kv_heads + h) * dim, cos, sin, angle, values, at, is_bf16, dim, 0);
        }
    }
}
