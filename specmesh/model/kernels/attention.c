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
 *
 * With AMX (bf16, head_dim a multiple of 32) the scores of a KV head's query heads are tile
 * products instead (amx_attention), for a block of positions at once (each key tile loaded once for
 * up to 16 queries), the mask and max go 8 keys at a time and the weighted values 16 lanes at a
 * time, a position's query heads side by side (each value row widened once for all of them). 9
 * heads on 3 KV heads, two threads of a 2-core AMX VM, a call (one position and one head at a time
 * before): 300 keys, 16 tree rows 71-75 us (104-107), 9 rows 41-44 (63-66), one row 12-17 (14-15);
 * 800 keys, 16 rows 170-179 us (254-256: over 30 layers, 7.6 ms of a 16-row forward, now 5.1-5.4).
 */
#include <math.h>

#include "amx.h"
#include "common.h"

#define KEYS 4 /* keys scored side by side */
#define AMX_COLUMNS 16 /* queries (positions x a KV head's query heads) scored together */
#define AMX_MAX_D 256
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

/* One query's weights (softmax_weights) on the L values from element `base` of the cache, over
 * their sum; its D outputs go to element o of out. */
static inline __attribute__((always_inline)) void weigh_values(const float *scores, const void *v_cache, int bf16,
                                                               int64_t base, int64_t L, int64_t D, void *out, int64_t o) {
    int64_t j;
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

/* One query (scaled, fp32) against the L keys and values from element `base` of the caches. */
static inline __attribute__((always_inline)) void attend(const float *qf, const void *k_cache, const void *v_cache,
                                                         int bf16, int64_t base, const uint8_t *visible, int64_t L,
                                                         int64_t D, float *scores, void *out, int64_t o) {
    for (int64_t j = 0; j < L; j += KEYS) score_keys(qf, k_cache, bf16, base + j * D, D, L - j < KEYS ? (int)(L - j) : KEYS, scores + j);
    softmax_weights(scores, visible, L);
    weigh_values(scores, v_cache, bf16, base, L, D, out, o);
}

#pragma GCC push_options
#pragma GCC target("amx-tile,amx-bf16,avx512f,avx512bw")

/* With AMX (bf16): the scores of up to AMX_COLUMNS queries on one KV head (a block of positions,
 * each with the KV head's G query heads), as tile products: a tile of 16 keys straight from the
 * cache (a row of 32 d a tile row) times the queries packed in pairs of d, 16 keys x the columns
 * a TDPBF16PS, then scaled. A score is one element's dot product, summed in the same order
 * whatever the other columns, the position or the batch, so a tree still verifies bit for bit what
 * decoding token by token gives; a block of positions loads each key tile once for all of them.
 * cols[n]: query n's row; keys: the KV head's [M, D] rows; scores[n * stride + j]. */
static void amx_block_scores(const uint16_t *const *cols, int64_t C, const uint16_t *keys, int64_t M,
                             int64_t L, int64_t D, float scale, float *scores, int64_t stride) {
    uint32_t packed[AMX_MAX_D / 32][16][AMX_COLUMNS]; /* [d / 32][pair of d][query]: B tiles, C * 4 bytes a row */
    float tile[16][AMX_COLUMNS];
    uint16_t tail[16 * AMX_MAX_D];
    for (int64_t s = 0; s < D / 32; s++)
        for (int r = 0; r < 16; r++)
            for (int64_t n = 0; n < C; n++) packed[s][r][n] = ((const uint32_t *)cols[n])[16 * s + r];
    /* Two tiles of keys at a time (tmm0 and tmm3), each B tile loaded once for both: two chains
     * of tile products side by side. Only the last tile can reach past the cache's end. */
    for (int64_t j0 = 0; j0 < L; j0 += 32) {
        const int pair = j0 + 16 < L, rows = L - j0 - 16 * pair < 16 ? (int)(L - j0 - 16 * pair) : 16;
        const uint16_t *first = keys + j0 * D, *second = keys + (j0 + 16) * D;
        if (pair ? j0 + 32 > M : j0 + 16 > M) { /* the cache ends within the last tile: its rows, zero-padded */
            __builtin_memset(tail, 0, sizeof(tail));
            __builtin_memcpy(tail, pair ? second : first, (size_t)rows * D * 2);
            *(pair ? &second : &first) = tail;
        }
        _tile_zero(0);
        if (pair) _tile_zero(3);
        for (int64_t s = 0; s < D / 32; s++) {
            _tile_loadd(2, &packed[s][0][0], AMX_COLUMNS * 4);
            _tile_loadd(1, first + 32 * s, D * 2);
            _tile_dpbf16ps(0, 1, 2);
            if (pair) {
                _tile_loadd(4, second + 32 * s, D * 2);
                _tile_dpbf16ps(3, 4, 2);
            }
        }
        _tile_stored(0, &tile[0][0], AMX_COLUMNS * 4);
        for (int r = 0; r < (pair ? 16 : rows); r++)
            for (int64_t n = 0; n < C; n++) scores[n * stride + j0 + r] = tile[r][n] * scale;
        if (pair) {
            _tile_stored(3, &tile[0][0], AMX_COLUMNS * 4);
            for (int r = 0; r < rows; r++)
                for (int64_t n = 0; n < C; n++) scores[n * stride + j0 + 16 + r] = tile[r][n] * scale;
        }
    }
}

/* weigh_values for bf16, 16 lanes (AVX-512, which every AMX CPU has), for `hb` <= 4 heads of one
 * position at once (their weights `stride` apart, their outputs D apart) and the `cw` 16-lane
 * chunks of d from d0: each value row is widened once for all the heads, and their cw * hb chains
 * run side by side (one head's 4 wait on the FMA's latency). A head's chains are weigh_values',
 * lane for lane, key for key: a weight of 0 (a key it may not see) adds exactly 0 to its sums,
 * where that one skips the key, so the same bits. `total`: the heads' weight sums, summed in the
 * first slice (d0 == 0) and read by the others. */
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
static void weigh_group(const float *scores, int64_t stride, int64_t G, const uint16_t *v, int64_t L, int64_t D,
                        uint16_t *out) {
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

/* tmm0, tmm3: scores (16 keys x C); tmm1, tmm4: keys (16 x 32 d); tmm2: queries (16 pairs of d x C). */
static void amx_configure(int64_t C) {
    struct amx_tile_config cfg = {0};
    cfg.palette = 1;
    cfg.rows[0] = cfg.rows[1] = cfg.rows[2] = cfg.rows[3] = cfg.rows[4] = 16;
    cfg.bytes_per_row[0] = cfg.bytes_per_row[2] = cfg.bytes_per_row[3] = (uint16_t)(C * 4);
    cfg.bytes_per_row[1] = cfg.bytes_per_row[4] = 64;
    _tile_loadconfig(&cfg);
}

static void amx_attention(const uint16_t *q, const uint16_t *k_cache, const void *v_cache, const int64_t *slots,
                          const uint8_t *mask, void *out, int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D,
                          int64_t M, int64_t L, float scale) {
    /* positions a block takes (their queries fill at most AMX_COLUMNS columns) */
    const int64_t G = H / Hkv, padded = (L + 7) / 8 * 8, P = AMX_COLUMNS / G < T ? AMX_COLUMNS / G : T;
    const int64_t blocks = (T + P - 1) / P;
#pragma omp parallel
    {
        amx_configure(P * G);
#pragma omp for collapse(3) schedule(dynamic)
        for (int64_t b = 0; b < B; b++)
            for (int64_t g = 0; g < Hkv; g++)
                for (int64_t i = 0; i < blocks; i++) {
                    const int64_t t0 = i * P, n_pos = T - t0 < P ? T - t0 : P, base = ((slots[b] * Hkv + g) * M) * D;
                    const uint16_t *cols[AMX_COLUMNS];
                    for (int64_t n = 0; n < P * G; n++) /* a short last block repeats its last query */
                        cols[n] = q + ((b * H + g * G + n % G) * T + t0 + (n / G < n_pos ? n / G : n_pos - 1)) * D;
                    float scores[P * G * padded];
                    amx_block_scores(cols, P * G, k_cache + base, M, L, D, scale, scores, padded);
                    for (int64_t p = 0; p < n_pos; p++) {
                        const uint8_t *visible = mask ? mask + (b * T + t0 + p) * L : 0;
                        float *position = scores + p * G * padded;
                        for (int64_t n = 0; n < G; n++) softmax_weights(position + n * padded, visible, L);
                        weigh_group(position, padded, G, (const uint16_t *)v_cache + base, L, D,
                                    (uint16_t *)out + ((b * T + t0 + p) * H + g * G) * D);
                    }
                }
        _tile_release();
    }
}

#pragma GCC pop_options

/*
 * q: [B, H, T, D]; k_cache, v_cache: [S, Hkv, M, D]; slots: [B]; mask: [B, T, L] (1 = may
 * attend) or NULL (every query sees all L keys); out: [B, T, H, D]. Query head h reads KV head
 * h / (H / Hkv). D is a multiple of 8 and at most 256.
 */
void specmesh_attention(const void *q, const void *k_cache, const void *v_cache, int bf16,
                        const int64_t *slots, const uint8_t *mask, void *out, int64_t B, int64_t H,
                        int64_t Hkv, int64_t T, int64_t D, int64_t M, int64_t L, float scale) {
    const int64_t groups = H / Hkv, padded = (L + 7) / 8 * 8;
    if (bf16 && D % 32 == 0 && D <= AMX_MAX_D && groups <= AMX_COLUMNS && specmesh_amx_ready() == 1) {
        amx_attention(q, k_cache, v_cache, slots, mask, out, B, H, Hkv, T, D, M, L, scale);
        return;
    }
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
