/* Each row's k largest values' indices, largest first, the lower index first among equal values:
 * the token-recycling rows (papers.md §11, the top-k successors of every node of a verified tree),
 * over a vocabulary's logits (fp32 or bf16). One pass over a row: 8 values at a time against the
 * k-th largest so far, and the few that beat it go into a sorted list of k. Rows split between the
 * threads from three rows on (cpu_ops.top_indices has the timings). A row with a NaN gets -1 in
 * its first entry: the caller asks torch. */
#include <math.h>

#include "common.h"

#define MAX_K 64

struct top { float values[MAX_K]; int64_t indices[MAX_K]; int k, filled; };

/* Values equal to one already in the list come after it: rows are scanned in index order. */
static inline void offer(struct top *t, float value, int64_t index) {
    if (t->filled == t->k && !(value > t->values[t->k - 1])) return;
    int at = t->filled < t->k ? t->filled++ : t->k - 1;
    while (at > 0 && value > t->values[at - 1]) {
        t->values[at] = t->values[at - 1];
        t->indices[at] = t->indices[at - 1];
        at--;
    }
    t->values[at] = value;
    t->indices[at] = index;
}

static void row_topk(const void *x, int is_bf16, int64_t start, int64_t n, int k, int64_t *out) {
    struct top t = {.k = k, .filled = 0};
    __m256 unordered = _mm256_setzero_ps();
    int64_t i = 0;
    __m256 floor = _mm256_set1_ps(-INFINITY); /* the k-th largest so far, once there are k */
    for (; i + 8 <= n; i += 8) {
        __m256 v = load_any(x, is_bf16, start + i);
        unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        int over = t.filled < k ? 0xFF : _mm256_movemask_ps(_mm256_cmp_ps(v, floor, _CMP_GT_OQ));
        if (!over) continue;
        for (; over; over &= over - 1) {
            int lane = __builtin_ctz(over);
            offer(&t, load_value(x, is_bf16, start + i + lane), i + lane);
        }
        if (t.filled == k) floor = _mm256_set1_ps(t.values[k - 1]);
    }
    for (; i < n; i++) {
        float v = load_value(x, is_bf16, start + i);
        if (isnan(v)) unordered = _mm256_set1_ps(NAN);
        offer(&t, v, i);
    }
    if (_mm256_movemask_ps(unordered)) {
        out[0] = -1;
        return;
    }
    for (int j = 0; j < k; j++) out[j] = t.indices[j];
}

/* x [rows, n] contiguous -> out [rows, k]; 0 < k <= min(n, MAX_K), else -1. */
int specmesh_topk(const void *x, int is_bf16, int64_t rows, int64_t n, int k, int64_t *out) {
    if (k <= 0 || k > MAX_K || k > n) return -1;
#pragma omp parallel for schedule(static) if (rows > 2)
    for (int64_t r = 0; r < rows; r++) row_topk(x, is_bf16, r * n, n, k, out + r * k);
    return 0;
}
