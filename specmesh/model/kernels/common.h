/* Shared helpers for the CPU kernels (AVX2 + FMA): bf16 <-> fp32, horizontal sum, exp. */
#ifndef SPECMESH_KERNELS_COMMON_H
#define SPECMESH_KERNELS_COMMON_H

#include <immintrin.h>
#include <stdint.h>

/* 8 floats from fp32 or from bf16 (bf16 is the high half of an fp32). */
static inline __m256 load_f32(const float *p) { return _mm256_loadu_ps(p); }

static inline __m256 load_bf16(const uint16_t *p) {
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

static inline float bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v = {(uint32_t)h << 16};
    return v.f;
}

/* Round to nearest even, as torch does. */
static inline uint16_t f32_to_bf16(float f) {
    union { float f; uint32_t u; } v = {f};
    return (uint16_t)((v.u + 0x7FFFu + ((v.u >> 16) & 1u)) >> 16);
}

/* One float rounded to bf16 (as f32_to_bf16), kept as fp32: what a bf16 op's result holds. */
static inline float bf16_rounded(float f) { return bf16_to_f32(f32_to_bf16(f)); }

/* 8 floats at element i of an fp32 or bf16 array (bf16 = 1). */
static inline __m256 load_any(const void *base, int bf16, int64_t i) {
    return bf16 ? load_bf16((const uint16_t *)base + i) : load_f32((const float *)base + i);
}

/* 8 floats rounded to bf16 as bf16_rounded rounds one (to nearest even), kept as fp32. */
static inline __m256 round_bf16(__m256 v) {
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    u = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb));
    return _mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32((int)0xFFFF0000u)));
}

/* 8 floats to element i of an fp32 or bf16 array (rounded as f32_to_bf16 rounds). */
static inline void store_any(void *base, int bf16, int64_t i, __m256 v) {
    if (!bf16) {
        _mm256_storeu_ps((float *)base + i, v);
        return;
    }
    __m256i high = _mm256_srli_epi32(_mm256_castps_si256(round_bf16(v)), 16);
    __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(high), _mm256_extracti128_si256(high, 1));
    _mm_storeu_si128((__m128i *)((uint16_t *)base + i), packed);
}

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Copy n values of a row that is fp32 (is_bf16 = 0) or bf16 into fp32. */
static inline void row_to_f32(const void *src, int is_bf16, float *dst, int64_t n) {
    if (is_bf16) {
        const uint16_t *s = (const uint16_t *)src;
        for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_f32(s[i]);
    } else {
        const float *s = (const float *)src;
        for (int64_t i = 0; i < n; i++) dst[i] = s[i];
    }
}

static inline float load_value(const void *src, int is_bf16, int64_t i) {
    return is_bf16 ? bf16_to_f32(((const uint16_t *)src)[i]) : ((const float *)src)[i];
}

static inline void store_value(void *dst, int is_bf16, int64_t i, float value) {
    if (is_bf16)
        ((uint16_t *)dst)[i] = f32_to_bf16(value);
    else
        ((float *)dst)[i] = value;
}

/* exp(x) for 8 floats: range reduction to 2^n * exp(r), |r| <= ln2/2, degree-6 polynomial
 * (relative error ~1e-7, the classic Cephes expf constants). */
static inline __m256 exp256(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.3762626647949f), lo = _mm256_set1_ps(-88.3762626647949f);
    x = _mm256_max_ps(_mm256_min_ps(x, hi), lo);
    __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    __m256i pow2n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(pow2n));
}

/* Whether this CPU has AVX-512 BF16 (VDPBF16PS): linear_bf16_dot.c and attention_bf16_dot.c are
 * compiled for every x86 CPU and run only where it does. */
static inline int avx512_bf16_ready(void) {
    static int ready = -1;
    if (ready < 0) {
        __builtin_cpu_init();
        ready = __builtin_cpu_supports("avx512bf16") != 0;
    }
    return ready;
}

/* With a few rows of x a tile is quick enough that the hardware prefetchers fall behind the weight
 * stream, so each tile prefetches, one cache line per weight row per step of k, the rows two of
 * WALK_TILES' chunks (4 steps of R rows) ahead: with two threads taking chunks in turn, usually
 * this thread's next one. Measured on a 2-core Zen 4, a forward's linears of the default model,
 * interleaved runs: the AVX-512 BF16 path 18% / 27% / 30% faster at 5 / 9 / 17 rows, the AVX2
 * fp32 path 20% / 32% / 23%, one row within 2%; one chunk ahead (the one the other thread is on)
 * was slower than no prefetching at 9 and 17 rows, half a chunk gained less. */
#define PREFETCH_ROWS(R) (8 * (R))

/* Where a tile of R weight rows from row r (of N rows of K values) prefetches from: PREFETCH_ROWS(R)
 * rows ahead, or near the end of w its own rows (already in cache). Every tile of x over the same
 * rows prefetches again: prefetching only in the first was 12-27% slower at 9-17 rows. */
#define PREFETCH_FROM(w0, r, R, N, K) \
    ((r) + PREFETCH_ROWS(R) + (R) <= (N) ? (w0) + PREFETCH_ROWS(R) * (K) : (w0))

/* y[n, N] = x . w^T walked tile by tile: rows r of w in steps of R, and for each step the n rows
 * of x in tiles of 6, then one tile of the 1..5 left. TILE##_C(w, x, y, y_bf16, K, N, r, c0)
 * computes one tile of C rows of x. Threads take 4 steps of r at a time (a dynamic schedule), not
 * a fixed share each: in a service the other processes preempt one of the cores now and then,
 * and with a static split the whole parallel region waits for the preempted thread's share
 * (measured through the local stack on a 2-core VM, plain decoding: 40.1 vs 34.5 tok/s over 3
 * alternating pairs; no change in process). */
#define WALK_TILES(TILE, R, w, x, y, y_bf16, n, K, N)                                         \
    _Pragma("omp parallel for schedule(dynamic, 4)")                                         \
    for (int64_t r = 0; r < N; r += R) TILES_OF_STEP(TILE, w, x, y, y_bf16, n, K, N, r)

/* One step of WALK_TILES: every tile of the n rows of x over the weight rows from row r. */
#define TILES_OF_STEP(TILE, w, x, y, y_bf16, n, K, N, r)                                      \
    {                                                                                        \
        int64_t c = 0;                                                                       \
        for (; c + 6 <= n; c += 6) TILE##_6(w, x, y, y_bf16, K, N, r, c);                    \
        switch (n - c) {                                                                     \
        case 1: TILE##_1(w, x, y, y_bf16, K, N, r, c); break;                                \
        case 2: TILE##_2(w, x, y, y_bf16, K, N, r, c); break;                                \
        case 3: TILE##_3(w, x, y, y_bf16, K, N, r, c); break;                                \
        case 4: TILE##_4(w, x, y, y_bf16, K, N, r, c); break;                                \
        case 5: TILE##_5(w, x, y, y_bf16, K, N, r, c); break;                                \
        }                                                                                    \
    }

/* A GEMM's arguments, for its chunks on helper.c's helper (helper.h). */
struct gemm_args {
    const void *x, *w;
    void *y;
    int y_bf16;
    int64_t n, K, N;
};

/* The helper's share of WALK_TILES: chunk `index` of a gemm_args GEMM is HELPER_STEPS steps of R
 * weight rows (WALK_TILES' OpenMP chunks), each tiled as WALK_TILES tiles it (the same bits); x
 * holds XT values, w WT values. HELPER_CHUNKS: how many chunks cover N weight rows. */
#define HELPER_STEPS 4
#define HELPER_CHUNKS(N, R) (((N) + HELPER_STEPS * (R) - 1) / (HELPER_STEPS * (R)))
#define DEFINE_HELPER_CHUNK(NAME, TILE, R, XT, WT)                                             \
    static void NAME(const void *args, int64_t index, int *scratch) {                          \
        (void)scratch;                                                                         \
        const struct gemm_args *g = args;                                                      \
        const XT *x = g->x;                                                                    \
        const WT *w = g->w;                                                                    \
        for (int64_t r = index * HELPER_STEPS * (R); r < g->N && r < (index + 1) * HELPER_STEPS * (R); r += (R)) \
            TILES_OF_STEP(TILE, w, x, g->y, g->y_bf16, g->n, g->K, g->N, r)                    \
    }

#endif
