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
#include "attention.h"

/* attention_bf16_dot.c: the bf16 path with AVX-512 BF16 dot products, where the CPU has them but no AMX. */
int bf16_dot_attention(const uint16_t *q, const uint16_t *k_cache, const uint16_t *v_cache, const int64_t *slots,
                       const uint8_t *mask, uint16_t *out, int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D,
                       int64_t M, int64_t L, float scale);

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
    if (bf16 && bf16_dot_attention(q, k_cache, v_cache, slots, mask, out, B, H, Hkv, T, D, M, L, scale) == 0) return;
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
