/* Each row's k largest values' indices, largest first, the lower index first among equal values,
 * over a vocabulary's logits (fp32 or bf16): with k = 1 the greedy rule's target token at every
 * node of a verified tree (torch.argmax's answer), with k = 8 the token-recycling rows (papers.md
 * §11, the top-k successors of every node). One pass over a row: 8 values at a time against the
 * k-th largest so far, and the few that beat it go into a sorted list of k. Rows split between the
 * threads from three rows on (right after the LM head wrote the logits, its threads are awake;
 * cpu_ops.row_argmax and top_indices have the timings). */
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

/* 1 where the row holds a NaN (its entries then mean nothing), else 0. */
static int row_topk(const void *x, int is_bf16, int64_t start, int64_t n, int k, int64_t *out) {
    struct top t = {.k = k, .filled = 0};
    __m256 unordered = _mm256_setzero_ps();
    __m256 floor = _mm256_set1_ps(-INFINITY); /* the k-th largest so far, once there are k */
    int64_t i = 0;
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
    int nan_seen = _mm256_movemask_ps(unordered) != 0;
    for (; i < n; i++) {
        float v = load_value(x, is_bf16, start + i);
        nan_seen |= isnan(v);
        offer(&t, v, i);
    }
    for (int j = 0; j < k; j++) out[j] = t.indices[j];
    return nan_seen;
}

/* x [rows, n] contiguous -> out [rows, k]. Returns 0; 1 where a row holds a NaN (the caller asks
 * torch, whose maximum is the NaN); -1 unless 0 < k <= min(n, MAX_K). */
int specmesh_topk(const void *x, int is_bf16, int64_t rows, int64_t n, int k, int64_t *out) {
    if (k <= 0 || k > MAX_K || k > n) return -1;
    int nan_rows = 0;
#pragma omp parallel for schedule(static) if (rows > 2) reduction(+ : nan_rows)
    for (int64_t r = 0; r < rows; r++) nan_rows += row_topk(x, is_bf16, r * n, n, k, out + r * k);
    return nan_rows > 0;
}
