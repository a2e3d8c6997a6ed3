/*
 * The GEMM y[n, N] = x[n, K] . w[N, K]^T for bf16 x and w on CPUs with AMX (Intel Sapphire
 * Rapids and later), for every forward from one token to a prefill chunk: from 2 rows on, the dot
 * products of linear_bf16_dot.c spend as long summing each output's lanes as multiplying, and
 * torch's oneDNN path (AMX too) streams the weights at ~12 GB/s where this one reaches ~29.
 *
 * One TDPBF16PS multiplies a tile of up to 16 x rows by 32 k into 16 outputs. The weights are
 * packed once (cpu_ops.vnni_packed) into blocks of 16 outputs, [N/16][K/2][16][2]: for each block,
 * K/2 rows of 64 bytes holding 16 outputs' pair of k, the layout a B tile loads with a 64-byte
 * stride. Threads take groups of 4 blocks (64 outputs, 4 accumulator tiles) one at a time (a
 * dynamic schedule, for the reason given at common.h's WALK_TILES), or, in a one-thread process
 * with helper.c's helper running, with the helper; x rows go in blocks of 16.
 * Each output row depends only on its own x row: a token's result does not depend on the rest
 * of the batch.
 */
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "amx.h"
#include "common.h"
#include "helper.h"

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#define BLOCK 16 /* outputs per B tile, and x rows per A tile */
#define GROUP 4  /* accumulator tiles (blocks of outputs) per walk step */

#pragma GCC push_options
#pragma GCC target("amx-tile,amx-bf16,avx512f,avx512bw")

/* tmm0..3: accumulators (rows x 16 fp32); tmm4: x (rows x 32 bf16); tmm5..7: weights (16 pairs
 * of k x 16 outputs). */
static void configure(int rows) {
    struct amx_tile_config cfg = {0};
    cfg.palette = 1;
    for (int t = 0; t < 5; t++) cfg.rows[t] = (uint8_t)rows, cfg.bytes_per_row[t] = 64;
    for (int t = 5; t < 8; t++) cfg.rows[t] = 16, cfg.bytes_per_row[t] = 64;
    _tile_loadconfig(&cfg);
}

/* One group: blocks [b, b + blocks) of outputs for x rows [c, c + rows). */
#define ACCUMULATE(T, TB)                                                                      \
    _tile_loadd(TB, packed + ((b + T) * (K / 2) + k / 2) * 2 * BLOCK, 64);                    \
    _tile_dpbf16ps(T, 4, TB);

static void group(const uint16_t *x, const uint16_t *packed, void *y, int y_bf16, int64_t K, int64_t N,
                  int64_t b, int blocks, int64_t c, int rows) {
    float acc[BLOCK][GROUP * BLOCK];
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t k = 0; k < K; k += 32) {
        _tile_loadd(4, x + c * K + k, K * 2);
        ACCUMULATE(0, 5)
        if (blocks > 1) { ACCUMULATE(1, 6) }
        if (blocks > 2) { ACCUMULATE(2, 7) }
        if (blocks > 3) { ACCUMULATE(3, 5) }
    }
    const int stride = GROUP * BLOCK * 4;
    _tile_stored(0, &acc[0][0], stride);
    if (blocks > 1) _tile_stored(1, &acc[0][BLOCK], stride);
    if (blocks > 2) _tile_stored(2, &acc[0][2 * BLOCK], stride);
    if (blocks > 3) _tile_stored(3, &acc[0][3 * BLOCK], stride);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < blocks * BLOCK; j++) store_value(y, y_bf16, (c + i) * N + b * BLOCK + j, acc[i][j]);
}

/* Chunk `index` of a gemm_args GEMM (common.h; w: the packed weights): one group of blocks of
 * outputs, for every block of x rows. */
static void gemm_chunk(const void *args, int64_t index, int *configured) {
    const struct gemm_args *g = args;
    const int64_t total = g->N / BLOCK, b = index * GROUP;
    int blocks = total - b < GROUP ? (int)(total - b) : GROUP;
    for (int64_t c = 0; c < g->n; c += BLOCK) {
        int rows = g->n - c < BLOCK ? (int)(g->n - c) : BLOCK;
        if (rows != *configured) configure(rows), *configured = rows;
        group(g->x, g->w, g->y, g->y_bf16, g->K, g->N, b, blocks, c, rows);
    }
}

static void tiles_done(int *configured) {
    if (*configured) _tile_release();
}

static void amx_gemm(const struct gemm_args *g) {
    const int64_t chunks = (g->N / BLOCK + GROUP - 1) / GROUP;
    if (helper_applies()) {
        struct helper_task task = {gemm_chunk, tiles_done, g, chunks};
        helper_run(&task);
        return;
    }
#pragma omp parallel
    {
        int configured = 0;
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < chunks; i++) gemm_chunk(g, i, &configured);
        tiles_done(&configured);
    }
}

#pragma GCC pop_options

/* Whether this process may use AMX: the CPU has it and Linux granted the tile state. */
static int amx_ready(void) {
    static int ready = -1;
    if (ready < 0) {
        __builtin_cpu_init();
        ready = __builtin_cpu_supports("amx-bf16") &&
                syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    }
    return ready;
}

int specmesh_amx_ready(void) { return amx_ready(); }

/* x: [n, K] bf16; packed: w [N, K] bf16 packed as above; y: [n, N]. K % 32 == 0, N % 16 == 0.
 * Returns 0, or -1 where AMX cannot be used. */
int specmesh_linear_amx(const void *x, const void *packed, void *y, int y_bf16, int64_t n, int64_t K,
                        int64_t N) {
    if (!amx_ready() || K % 32 || N % BLOCK) return -1;
    struct gemm_args g = {x, packed, y, y_bf16, n, K, N};
    amx_gemm(&g);
    return 0;
}
