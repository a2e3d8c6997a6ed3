/*
 * Tree attention over KV-cache slots for a few query tokens per sequence (a draft tree's root and
 * nodes), with grouped-query heads. Each query row sees the keys its mask allows: the slot's
 * prefix and its own ancestors in the tree (specmesh/tree.py). Scores, softmax and the weighted
 * sum of values are in fp32; q, the cache and the output are all fp32 or all bf16.
 *
 * Where the time goes (2-core Sapphire Rapids, 9 heads of 64, 300 keys): not memory but the
 * dependency chains of one query's arithmetic, so the scores run KEYS keys side by side and the
 * weighted values keep their accumulators in registers: 21-26% less time a call than one key and
 * one spilled accumulator array at a time, bit for bit the same result. Widening
 * each bf16 K/V row once per call for all the queries that read it (instead of once per query)
 * gained little and cost a second parallel region (~20 us): not done.
 */
#include <math.h>

#include "common.h"

#define KEYS 4 /* keys scored side by side */
#define CHUNKS 8 /* 8-float chunks of d accumulated per pass over the values */

/* Scores of the n <= KEYS key rows from element `row`: each dot product summed exactly as for a
 * lone key (8 lanes along d, then across the lanes), the n chains side by side. */
static inline __attribute__((always_inline)) void score_keys(const float *qf, const void *k, int bf16, int64_t row,
                                                             int64_t D, int n, float *scores) {
    __m256 acc[KEYS];
    _Pragma("GCC unroll 4") for (int i = 0; i < KEYS; i++) acc[i] = _mm256_setzero_ps();
    for (int64_t d = 0; d < D; d += 8) {
        __m256 qv = _mm256_loadu_ps(qf + d);
        _Pragma("GCC unroll 4") for (int i = 0; i < KEYS; i++)
            if (i < n) acc[i] = _mm256_fmadd_ps(qv, load_any(k, bf16, row + i * D + d), acc[i]);
    }
    _Pragma("GCC unroll 4") for (int i = 0; i < n; i++) scores[i] = hsum(acc[i]);
}

/* One query (scaled, fp32) against the L keys and values from element `base` of the caches; its
 * D outputs go to element o of out. */
static inline __attribute__((always_inline)) void attend(const float *qf, const void *k_cache, const void *v_cache,
                                                         int bf16, int64_t base, const uint8_t *visible, int64_t L,
                                                         int64_t D, float *scores, void *out, int64_t o) {
    const int64_t padded = (L + 7) / 8 * 8;
    int64_t j;
    for (j = 0; j < L; j += KEYS) score_keys(qf, k_cache, bf16, base + j * D, D, L - j < KEYS ? (int)(L - j) : KEYS, scores + j);
    float best = -INFINITY;
    for (j = 0; j < L; j++) {
        if (visible && !visible[j])
            scores[j] = -INFINITY;
        else if (scores[j] > best)
            best = scores[j];
    }
    /* exp over whole 8-lane chunks (the tail padded with masked keys) and sums in key order: a
     * query's result then depends only on the keys it sees, not on where they sit in the cache,
     * so verifying a tree gives bit for bit what decoding token by token gives. */
    for (j = L; j < padded; j++) scores[j] = -INFINITY;
    for (j = 0; j < padded; j += 8) {
        __m256 s = _mm256_loadu_ps(scores + j);
        __m256 keep = _mm256_cmp_ps(s, _mm256_set1_ps(-INFINITY), _CMP_NEQ_OQ);
        _mm256_storeu_ps(scores + j, _mm256_and_ps(exp256(_mm256_sub_ps(s, _mm256_set1_ps(best))), keep));
    }
    /* The weighted values CHUNKS x 8 floats of d per pass; the first pass also sums the weights
     * (a scalar chain, hidden behind the FMAs). */
    float total = 0.0f;
    for (int64_t d0 = 0; d0 < D; d0 += 8 * CHUNKS) {
        const int chunks = D - d0 >= 8 * CHUNKS ? CHUNKS : (int)(D - d0) / 8;
        __m256 acc[CHUNKS];
        _Pragma("GCC unroll 8") for (int c = 0; c < CHUNKS; c++) acc[c] = _mm256_setzero_ps();
        for (j = 0; j < L; j++) {
            if (scores[j] == 0.0f) continue;
            if (d0 == 0) total += scores[j];
            __m256 p = _mm256_set1_ps(scores[j]);
            _Pragma("GCC unroll 8") for (int c = 0; c < CHUNKS; c++)
                if (c < chunks) acc[c] = _mm256_fmadd_ps(p, load_any(v_cache, bf16, base + j * D + d0 + c * 8), acc[c]);
        }
        _Pragma("GCC unroll 8") for (int c = 0; c < chunks; c++) {
            float lane[8];
            _mm256_storeu_ps(lane, _mm256_div_ps(acc[c], _mm256_set1_ps(total)));
            for (int i = 0; i < 8; i++) store_value(out, bf16, o + d0 + c * 8 + i, lane[i]);
        }
    }
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
                const int64_t base = ((slots[b] * Hkv + h / groups) * M) * D, o = ((b * T + t) * H + h) * D;
                const uint8_t *visible = mask ? mask + (b * T + t) * L : 0;
                if (bf16)
                    attend(qf, k_cache, v_cache, 1, base, visible, L, D, scores, out, o);
                else
                    attend(qf, k_cache, v_cache, 0, base, visible, L, D, scores, out, o);
            }
}
