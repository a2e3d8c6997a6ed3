/* What attention.c's tree attention paths share: a query's softmax weights (AVX2) and, with
 * AVX-512, the weighted values of a position's query heads on one KV head. */
#ifndef SPECMESH_KERNELS_ATTENTION_H
#define SPECMESH_KERNELS_ATTENTION_H

#include <math.h>

#include "common.h"

/* One query's scores [L] (room for L rounded up to 8) in place: exp(score - best) for the keys it
 * sees, 0 for the others and the padding. */
static inline __attribute__((always_inline)) void softmax_weights(float *scores, const uint8_t *visible, int64_t L) {
    const int64_t padded = (L + 7) / 8 * 8;
    int64_t j;
    /* the keys it may not see to -inf, and the best score, 8 keys at a time (max is exact, so the
     * same best as one key at a time) */
    const __m256 hidden = _mm256_set1_ps(-INFINITY);
    __m256 best8 = hidden;
    for (j = 0; j + 8 <= L; j += 8) {
        __m256 s = _mm256_loadu_ps(scores + j);
        if (visible) {
            __m256i seen = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(visible + j)));
            s = _mm256_blendv_ps(hidden, s, _mm256_castsi256_ps(_mm256_cmpgt_epi32(seen, _mm256_setzero_si256())));
            _mm256_storeu_ps(scores + j, s);
        }
        best8 = _mm256_max_ps(best8, s);
    }
    float lanes[8], best = -INFINITY;
    _mm256_storeu_ps(lanes, best8);
    for (int i = 0; i < 8; i++) best = lanes[i] > best ? lanes[i] : best;
    for (; j < L; j++) {
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
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw")

/* weigh_values for bf16, 16 lanes (AVX-512: every AMX CPU has it, and every AVX-512 BF16 one),
 * for `hb` <= 4 heads of one position at once (their weights `stride` apart, their outputs D
 * apart) and the `cw` 16-lane chunks of d from d0: each value row is widened once for all the
 * heads, and their cw * hb chains run side by side (one head's 4 wait on the FMA's latency). A
 * head's chains are weigh_values', lane for lane, key for key: a weight of 0 (a key it may not
 * see) adds exactly 0 to its sums, where that one skips the key, so the same bits. `total`: the
 * heads' weight sums, summed in the first slice (d0 == 0) and read by the others. */
static inline __attribute__((always_inline)) void weigh_slice(const float *scores, int64_t stride, const int hb,
                                                              const int cw, const uint16_t *v, int64_t L, int64_t D,
                                                              int64_t d0, float *total, uint16_t *out) {
    __m512 acc[4][4];
    float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* in registers: total might alias the weights */
    _Pragma("GCC unroll 4") for (int n = 0; n < hb; n++)
        _Pragma("GCC unroll 4") for (int c = 0; c < cw; c++) acc[n][c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < L; j++) {
        __m512 row[4];
        _Pragma("GCC unroll 4") for (int c = 0; c < cw; c++) {
            __m256i half = _mm256_loadu_si256((const __m256i *)(v + j * D + d0 + c * 16));
            row[c] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
        }
        _Pragma("GCC unroll 4") for (int n = 0; n < hb; n++) {
            const float w = scores[n * stride + j];
            if (d0 == 0) sum[n] += w;
            const __m512 p = _mm512_set1_ps(w);
            _Pragma("GCC unroll 4") for (int c = 0; c < cw; c++) acc[n][c] = _mm512_fmadd_ps(p, row[c], acc[n][c]);
        }
    }
    if (d0 == 0)
        _Pragma("GCC unroll 4") for (int n = 0; n < hb; n++) total[n] = sum[n];
    _Pragma("GCC unroll 4") for (int n = 0; n < hb; n++)
        _Pragma("GCC unroll 4") for (int c = 0; c < cw; c++) { /* each half rounded by common.h's store_any */
            __m512i mean = _mm512_castps_si512(_mm512_div_ps(acc[n][c], _mm512_set1_ps(total[n])));
            store_any(out, 1, n * D + d0 + c * 16, _mm256_castsi256_ps(_mm512_castsi512_si256(mean)));
            store_any(out, 1, n * D + d0 + c * 16 + 8, _mm256_castsi256_ps(_mm512_extracti64x4_epi64(mean, 1)));
        }
}

/* weigh_slice for `hb` heads (1-4, a constant in each call, so that the accumulators stay in
 * registers) and `CW` 16-lane chunks. */
#define WEIGH_SLICE(CW)                                                    \
    switch (hb) {                                                          \
        case 1: weigh_slice(s, stride, 1, CW, v, L, D, d0, total, o); break; \
        case 2: weigh_slice(s, stride, 2, CW, v, L, D, d0, total, o); break; \
        case 3: weigh_slice(s, stride, 3, CW, v, L, D, d0, total, o); break; \
        default: weigh_slice(s, stride, 4, CW, v, L, D, d0, total, o); break; \
    }

/* The weighted values of a position's G heads (weights `stride` apart, outputs D apart), D a
 * multiple of 32: heads 4 at a time, d 64 at a time (a last 32). */
static inline void weigh_group(const float *scores, int64_t stride, int64_t G, const uint16_t *v, int64_t L,
                               int64_t D, uint16_t *out) {
    for (int64_t n = 0; n < G; n += 4) {
        const float *s = scores + n * stride;
        uint16_t *o = out + n * D;
        const int hb = G - n < 4 ? (int)(G - n) : 4;
        float total[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int64_t d0 = 0; d0 < D; d0 += 64) {
            if (D - d0 >= 64) {
                WEIGH_SLICE(4)
            } else {
                WEIGH_SLICE(2)
            }
        }
    }
}

#pragma GCC pop_options

#endif
