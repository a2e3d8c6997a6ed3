/*
 * The skinny GEMM of linear.c for bf16 x and bf16 w on CPUs with AVX-512 BF16 (AMD Zen 4,
 * Intel Cooper Lake and later): VDPBF16PS multiplies 32 bf16 pairs and accumulates them into 16
 * fp32 lanes, twice the work of an fp32 FMA per instruction, with no widening of the weights.
 * Tiles of 4 weight rows x up to 6 x rows (24 accumulators); every weight row is streamed once
 * per call. Each output sums its K products in the same order whatever n is, so a token's result
 * does not depend on the rest of the batch; tiles are walked as in linear.c (common.h).
 * Each tile prefetches the weight rows PREFETCH_ROWS(4) ahead (common.h says why).
 * Compiled for any x86 CPU; runs only where the CPU has the instructions (bf16_dot_gemm returns
 * -1 elsewhere).
 */
#include "common.h"
#include "helper.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512bf16")

static inline __m512bh load_pairs(const uint16_t *p, __mmask32 mask) {
    return (__m512bh)_mm512_maskz_loadu_epi16(mask, p);
}

#define DEFINE_DOT_TILE(C)                                                                   \
    static inline void dot_tile_##C(const uint16_t *w, const uint16_t *x, void *y, int y_bf16, \
                                    int64_t K, int64_t N, int64_t r, int64_t c0) {           \
        __m512 a[4][C];                                                                      \
        _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++)                                  \
            _Pragma("GCC unroll 6") for (int j = 0; j < C; j++) a[i][j] = _mm512_setzero_ps(); \
        const uint16_t *w0 = w + r * K, *xs = x + c0 * K;                                    \
        const uint16_t *ahead = PREFETCH_FROM(w0, r, 4, N, K);                             \
        for (int64_t k = 0; k < K; k += 32) {                                                \
            __mmask32 m = K - k >= 32 ? (__mmask32)~0u : (__mmask32)((1u << (K - k)) - 1);   \
            __m512bh v[4];                                                                   \
            _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {                            \
                _mm_prefetch((const char *)(ahead + i * K + k), _MM_HINT_T0);                \
                v[i] = load_pairs(w0 + i * K + k, m);                                        \
            }                                                                                \
            _Pragma("GCC unroll 6") for (int j = 0; j < C; j++) {                            \
                __m512bh xv = load_pairs(xs + j * K + k, m);                                 \
                _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++)                          \
                    a[i][j] = _mm512_dpbf16_ps(a[i][j], v[i], xv);                           \
            }                                                                                \
        }                                                                                    \
        _Pragma("GCC unroll 6") for (int j = 0; j < C; j++)                                  \
            _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++)                              \
                store_value(y, y_bf16, (c0 + j) * N + r + i, _mm512_reduce_add_ps(a[i][j])); \
    }

DEFINE_DOT_TILE(1)
DEFINE_DOT_TILE(2)
DEFINE_DOT_TILE(3)
DEFINE_DOT_TILE(4)
DEFINE_DOT_TILE(5)
DEFINE_DOT_TILE(6)

static void dot_gemm(const uint16_t *x, const uint16_t *w, void *y, int y_bf16, int64_t n, int64_t K,
                     int64_t N) {
    WALK_TILES(dot_tile, 4, w, x, y, y_bf16, n, K, N)
}

DEFINE_HELPER_CHUNK(dot_chunk, dot_tile, 4, uint16_t, uint16_t)

#pragma GCC pop_options

/* x: [n, K] bf16; w: [N, K] bf16; y: [n, N]. Returns 0, or -1 where it does not apply (no
 * AVX-512 BF16 on this CPU, or N not a multiple of 4): the caller then takes the AVX2 path. */
int bf16_dot_gemm(const uint16_t *x, const uint16_t *w, void *y, int y_bf16, int64_t n, int64_t K,
                  int64_t N) {
    if (!avx512_bf16_ready() || N % 4) return -1;
    if (helper_applies()) { /* a one-thread process: its chunks shared with the helper when a core is free */
        const struct gemm_args g = {x, w, y, y_bf16, n, K, N};
        const struct helper_task task = {dot_chunk, 0, &g, HELPER_CHUNKS(N, 4)};
        helper_run(&task);
        return 0;
    }
    dot_gemm(x, w, y, y_bf16, n, K, N);
    return 0;
}
