/*
 * Tree attention over KV-cache slots for a few query tokens per sequence (a draft tree's root and
 * nodes), with grouped-query heads. Each query row sees the keys its mask allows: the slot's
 * prefix and its own ancestors in the tree (specmesh/tree.py). Scores, softmax and the weighted
 * sum of values are in fp32; q, the cache and the output are all fp32 or all bf16.
 */
#include <math.h>

#include "common.h"

static inline __m256 load_any(const void *base, int bf16, int64_t i) {
    return bf16 ? load_bf16((const uint16_t *)base + i) : load_f32((const float *)base + i);
}

/*
 * q: [B, H, T, D]; k_cache, v_cache: [S, Hkv, M, D]; slots: [B]; mask: [B, T, L] (1 = may
 * attend) or NULL (every query sees all L keys); out: [B, T, H, D]. Query head h reads KV head
 * h / (H / Hkv). D is a multiple of 8 and at most 256.
 */
void specmesh_attention(const void *q, const void *k_cache, const void *v_cache, int bf16,
                        const int64_t *slots, const uint8_t *mask, void *out, int64_t B, int64_t H,
                        int64_t Hkv, int64_t T, int64_t D, int64_t M, int64_t L, float scale) {
    const int64_t groups = H / Hkv, padded = (L + 7) / 8 * 8;
#pragma omp parallel for collapse(3) schedule(dynamic)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++) {
                float qf[D], scores[padded];
                row_to_f32((const char *)q + ((b * H + h) * T + t) * D * (bf16 ? 2 : 4), bf16, qf, D);
                for (int64_t d = 0; d < D; d++) qf[d] *= scale;
                const int64_t base = ((slots[b] * Hkv + h / groups) * M) * D;
                const uint8_t *visible = mask ? mask + (b * T + t) * L : 0;
                float best = -INFINITY;
                for (int64_t j = 0; j < L; j++) {
                    if (visible && !visible[j]) {
                        scores[j] = -INFINITY;
                        continue;
                    }
                    __m256 acc = _mm256_setzero_ps();
                    for (int64_t d = 0; d < D; d += 8)
                        acc = _mm256_fmadd_ps(_mm256_loadu_ps(qf + d), load_any(k_cache, bf16, base + j * D + d), acc);
                    scores[j] = hsum(acc);
                    if (scores[j] > best) best = scores[j];
                }
                /* exp over whole 8-lane chunks (the tail padded with masked keys) and a sum in key
                 * order: a query's result then depends only on the keys it sees, not on where they
                 * sit in the cache, so verifying a tree gives bit for bit what decoding token by
                 * token gives. */
                for (int64_t j = L; j < padded; j++) scores[j] = -INFINITY;
                for (int64_t j = 0; j < padded; j += 8) {
                    __m256 s = _mm256_loadu_ps(scores + j);
                    __m256 keep = _mm256_cmp_ps(s, _mm256_set1_ps(-INFINITY), _CMP_NEQ_OQ);
                    _mm256_storeu_ps(scores + j, _mm256_and_ps(exp256(_mm256_sub_ps(s, _mm256_set1_ps(best))), keep));
                }
                float total = 0.0f;
                for (int64_t j = 0; j < L; j++) total += scores[j];
                __m256 acc[32];
                for (int64_t d = 0; d < D / 8; d++) acc[d] = _mm256_setzero_ps();
                for (int64_t j = 0; j < L; j++) {
                    if (scores[j] == 0.0f) continue;
                    __m256 p = _mm256_set1_ps(scores[j]);
                    for (int64_t d = 0; d < D / 8; d++)
                        acc[d] = _mm256_fmadd_ps(p, load_any(v_cache, bf16, base + j * D + d * 8), acc[d]);
                }
                const int64_t o = ((b * T + t) * H + h) * D;
                for (int64_t d = 0; d < D / 8; d++) {
                    float lane[8];
                    _mm256_storeu_ps(lane, _mm256_div_ps(acc[d], _mm256_set1_ps(total)));
                    for (int i = 0; i < 8; i++) store_value(out, bf16, o + d * 8 + i, lane[i]);
                }
            }
}
