/*
 * Skinny GEMM for verifying draft trees on CPUs without native bf16 matmuls (AVX2 + FMA):
 *   y[n, N] = x[n, K] . w[N, K]^T   with n small (the tokens of a few draft trees).
 * BLAS libraries are tuned for large n; for n = 1..64 they fall far below both the memory and
 * the FMA bound, and without AMX or AVX-512 BF16 their bf16 path is emulated. Here every weight
 * row is streamed from memory once per call and reused from L1 across all n rows of x (tiles of
 * 2 weight rows x up to 6 x rows), so a tree of 16 tokens costs little more than one token.
 * Each tile prefetches the weight rows PREFETCH_ROWS(2) ahead (common.h says why).
 * Accumulation is fp32, in the same order whatever n is: a token's result does not depend on
 * the rest of the batch. x, w and y are each fp32 or bf16. In a one-thread process with the
 * helper (helper.h: a drafter beside its verifier) the steps of weight rows are shared with it.
 */
#include <stdlib.h>

#include "common.h"
#include "helper.h"

/* linear_bf16_dot.c: the same GEMM with AVX-512 BF16 dot products, where the CPU has them. */
int bf16_dot_gemm(const uint16_t *x, const uint16_t *w, void *y, int y_bf16, int64_t n, int64_t K,
                  int64_t N);

#define DEFINE_TILE(NAME, WT, LOAD, C)                                                       \
    static inline void NAME(const WT *w, const float *x, void *y, int y_bf16, int64_t K,     \
                            int64_t N, int64_t r, int64_t c0) {                              \
        __m256 a[2][C];                                                                      \
        for (int i = 0; i < 2; i++)                                                          \
            for (int j = 0; j < C; j++) a[i][j] = _mm256_setzero_ps();                       \
        const WT *w0 = w + r * K, *w1 = w0 + K;                                              \
        const WT *ahead = PREFETCH_FROM(w0, r, 2, N, K);                                   \
        const float *xs = x + c0 * K;                                                        \
        for (int64_t k = 0; k < K; k += 8) {                                                 \
            _mm_prefetch((const char *)(ahead + k), _MM_HINT_T0);                            \
            _mm_prefetch((const char *)(ahead + K + k), _MM_HINT_T0);                        \
            __m256 v0 = LOAD(w0 + k), v1 = LOAD(w1 + k);                                     \
            _Pragma("GCC unroll 6") for (int j = 0; j < C; j++) {                            \
                __m256 xv = _mm256_loadu_ps(xs + j * K + k);                                 \
                a[0][j] = _mm256_fmadd_ps(v0, xv, a[0][j]);                                  \
                a[1][j] = _mm256_fmadd_ps(v1, xv, a[1][j]);                                  \
            }                                                                                \
        }                                                                                    \
        for (int j = 0; j < C; j++) {                                                        \
            store_value(y, y_bf16, (c0 + j) * N + r, hsum(a[0][j]));                         \
            store_value(y, y_bf16, (c0 + j) * N + r + 1, hsum(a[1][j]));                     \
        }                                                                                    \
    }

#define DEFINE_GEMM(NAME, WT, LOAD)                                                          \
    DEFINE_TILE(NAME##_1, WT, LOAD, 1)                                                       \
    DEFINE_TILE(NAME##_2, WT, LOAD, 2)                                                       \
    DEFINE_TILE(NAME##_3, WT, LOAD, 3)                                                       \
    DEFINE_TILE(NAME##_4, WT, LOAD, 4)                                                       \
    DEFINE_TILE(NAME##_5, WT, LOAD, 5)                                                       \
    DEFINE_TILE(NAME##_6, WT, LOAD, 6)                                                       \
    static void NAME(const float *x, const WT *w, void *y, int y_bf16, int64_t n, int64_t K, \
                     int64_t N) {                                                            \
        WALK_TILES(NAME, 2, w, x, y, y_bf16, n, K, N)                                        \
    }

DEFINE_GEMM(gemm_w_f32, float, load_f32)
DEFINE_GEMM(gemm_w_bf16, uint16_t, load_bf16)

DEFINE_HELPER_CHUNK(gemm_w_f32_chunk, gemm_w_f32, 2, float, float)
DEFINE_HELPER_CHUNK(gemm_w_bf16_chunk, gemm_w_bf16, 2, float, uint16_t)

/* x: [n, K]; w: [N, K] with K % 8 == 0 and N even; y: [n, N]. Returns 0, or -1 on no memory. */
int specmesh_linear(const void *x, int x_bf16, const void *w, int w_bf16, void *y, int y_bf16,
                    int64_t n, int64_t K, int64_t N) {
    if (x_bf16 && w_bf16 && bf16_dot_gemm(x, w, y, y_bf16, n, K, N) == 0) return 0;
    float *xf = (float *)x;
    if (x_bf16) {
        xf = (float *)malloc(sizeof(float) * n * K);
        if (!xf) return -1;
        row_to_f32(x, 1, xf, n * K);
    }
    if (helper_applies()) { /* a one-thread process: its chunks shared with the helper when a core is free */
        const struct gemm_args g = {xf, w, y, y_bf16, n, K, N};
        const struct helper_task task = {w_bf16 ? gemm_w_bf16_chunk : gemm_w_f32_chunk, 0, &g, HELPER_CHUNKS(N, 2)};
        helper_run(&task);
    } else if (w_bf16)
        gemm_w_bf16(xf, (const uint16_t *)w, y, y_bf16, n, K, N);
    else
        gemm_w_f32(xf, (const float *)w, y, y_bf16, n, K, N);
    if (x_bf16) free(xf);
    return 0;
}
