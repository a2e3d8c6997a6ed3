/*
 * attention.c's tree attention for bf16 on CPUs with AVX-512 BF16 but no AMX (AMD Zen 4, Intel
 * Cooper Lake): a score is VDPBF16PS products of the bf16 query and key (exact products, summed in
 * fp32) instead of widening every key element to fp32 for an 8-lane FMA; 16 keys' 16-lane sums
 * are then reduced together, each key's lanes in a fixed tree (sum16), so a score has the same
 * bits whatever the other keys, the position or the batch, and a tree still verifies bit for bit
 * what decoding token by token gives. The weighted values are attention.h's 16-lane weigh_group,
 * a position's query heads side by side (each value row widened once for them).
 * Measured on a 2-core Zen 4, 9 heads of 64 on 3 KV heads, 30 calls (a forward's layers), 300 /
 * 800 keys: 16 tree rows 4.4 / 10.7 ms on the AVX2 path, 9 rows 2.6 / 6.4, one row 0.44 / 0.92.
 */
#include "attention.h"

#define BLOCK 16 /* keys scored together */

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512bf16")

/* Lane i of the result: the sum of the 16 lanes of a[i], for each a[i] the same tree of adds
 * (pairs of lanes 2 apart, then 1 apart, within each 128-bit quarter, then the quarters). */
static inline __m512 sum16(const __m512 a[BLOCK]) {
    __m512 pairs[8], quads[4], halves[2];
    for (int i = 0; i < 8; i++)
        pairs[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    for (int i = 0; i < 4; i++)
        quads[i] = _mm512_add_ps(_mm512_shuffle_ps(pairs[2 * i], pairs[2 * i + 1], 0x44),
                                 _mm512_shuffle_ps(pairs[2 * i], pairs[2 * i + 1], 0xEE));
    for (int i = 0; i < 2; i++)
        halves[i] = _mm512_add_ps(_mm512_shuffle_f32x4(quads[2 * i], quads[2 * i + 1], 0x88),
                                  _mm512_shuffle_f32x4(quads[2 * i], quads[2 * i + 1], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(halves[0], halves[1], 0x88), _mm512_shuffle_f32x4(halves[0], halves[1], 0xDD));
}

/* The scores of a position's G query heads (queries[n], D bf16 each) on the L keys of one KV
 * head, times scale, to scores[n * stride + j] (stride a multiple of BLOCK: a block's 16 are
 * stored whole). A last block short of keys rescores key L - 1 in the missing places. */
static void dot_scores(const uint16_t *const *queries, int64_t G, const uint16_t *keys, int64_t L, int64_t D,
                       float scale, float *scores, int64_t stride) {
    for (int64_t j0 = 0; j0 < L; j0 += BLOCK) {
        const uint16_t *rows[BLOCK];
        for (int i = 0; i < BLOCK; i++) rows[i] = keys + (j0 + i < L ? j0 + i : L - 1) * D;
        for (int64_t n = 0; n < G; n++) {
            __m512 acc[BLOCK];
            _Pragma("GCC unroll 16") for (int i = 0; i < BLOCK; i++) acc[i] = _mm512_setzero_ps();
            for (int64_t d = 0; d < D; d += 32) {
                const __m512bh q = (__m512bh)_mm512_loadu_si512(queries[n] + d);
                _Pragma("GCC unroll 16") for (int i = 0; i < BLOCK; i++)
                    acc[i] = _mm512_dpbf16_ps(acc[i], q, (__m512bh)_mm512_loadu_si512(rows[i] + d));
            }
            _mm512_storeu_ps(scores + n * stride + j0, _mm512_mul_ps(sum16(acc), _mm512_set1_ps(scale)));
        }
    }
}

static void dot_attention(const uint16_t *q, const uint16_t *k_cache, const uint16_t *v_cache, const int64_t *slots,
                          const uint8_t *mask, uint16_t *out, int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D,
                          int64_t M, int64_t L, float scale) {
    const int64_t G = H / Hkv, stride = (L + BLOCK - 1) / BLOCK * BLOCK;
#pragma omp parallel for collapse(3) schedule(dynamic)
    for (int64_t b = 0; b < B; b++)
        for (int64_t g = 0; g < Hkv; g++)
            for (int64_t t = 0; t < T; t++) {
                const int64_t base = ((slots[b] * Hkv + g) * M) * D;
                const uint16_t *queries[G];
                for (int64_t n = 0; n < G; n++) queries[n] = q + ((b * H + g * G + n) * T + t) * D;
                float scores[G * stride];
                dot_scores(queries, G, k_cache + base, L, D, scale, scores, stride);
                const uint8_t *visible = mask ? mask + (b * T + t) * L : 0;
                for (int64_t n = 0; n < G; n++) softmax_weights(scores + n * stride, visible, L);
                weigh_group(scores, stride, G, v_cache + base, L, D, out + ((b * T + t) * H + g * G) * D);
            }
}

#pragma GCC pop_options

/* attention.c's arguments, bf16. Returns 0, or -1 where it does not apply (no AVX-512 BF16 on
 * this CPU, or D not a multiple of 32): the caller then takes another path. */
int bf16_dot_attention(const uint16_t *q, const uint16_t *k_cache, const uint16_t *v_cache, const int64_t *slots,
                       const uint8_t *mask, uint16_t *out, int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D,
                       int64_t M, int64_t L, float scale) {
    if (!avx512_bf16_ready() || D % 32) return -1;
    dot_attention(q, k_cache, v_cache, slots, mask, out, B, H, Hkv, T, D, M, L, scale);
    return 0;
}
