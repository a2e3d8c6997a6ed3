/* RMSNorm (Zhang & Sennrich 2019), as Llama uses it: y = w * x / sqrt(mean(x^2) + eps), the
 * statistics in fp32; x, w and y are each fp32 or bf16. One row per token. Alone, or after the
 * residual add that precedes it in a decoder layer (one pass instead of two ops). */
#include <math.h>

#include "common.h"

/* One row: y = w * x / sqrt(mean(x^2) + eps), x already in fp32 (the activation dtype's values). */
static inline void norm_row(const float *row, int x_bf16, const void *w, int w_bf16, void *y, int y_bf16, int64_t r,
                            int64_t dim, float eps) {
    float weight[dim];
    row_to_f32(w, w_bf16, weight, dim);
    float sum = 0.0f;
    for (int64_t i = 0; i < dim; i++) sum += row[i] * row[i];
    float scale = 1.0f / sqrtf(sum / (float)dim + eps);
    for (int64_t i = 0; i < dim; i++) {
        /* as Hugging Face: normalise in fp32, round to the activation dtype, then weight */
        float normed = row[i] * scale;
        if (x_bf16) normed = bf16_rounded(normed);
        store_value(y, y_bf16, r * dim + i, weight[i] * normed);
    }
}

void specmesh_rms_norm(const void *x, int x_bf16, const void *w, int w_bf16, void *y, int y_bf16,
                       int64_t rows, int64_t dim, float eps) {
#pragma omp parallel for schedule(static) if (rows > 4)
    for (int64_t r = 0; r < rows; r++) {
        float row[dim];
        row_to_f32((const char *)x + r * dim * (x_bf16 ? 2 : 4), x_bf16, row, dim);
        norm_row(row, x_bf16, w, w_bf16, y, y_bf16, r, dim, eps);
    }
}

/* A decoder layer's residual step and the next norm in one pass: sum = x + delta, rounded to the
 * activation dtype (x, delta and sum share it) as torch's x + delta is, then y = RMSNorm(sum). */
void specmesh_add_rms_norm(const void *x, const void *delta, int is_bf16, const void *w, int w_bf16, void *sum, void *y,
                           int64_t rows, int64_t dim, float eps) {
#pragma omp parallel for schedule(static) if (rows > 4)
    for (int64_t r = 0; r < rows; r++) {
        float row[dim];
        for (int64_t i = 0; i < dim; i++) {
            float value = load_value(x, is_bf16, r * dim + i) + load_value(delta, is_bf16, r * dim + i);
            row[i] = is_bf16 ? bf16_rounded(value) : value;
            store_value(sum, is_bf16, r * dim + i, row[i]);
        }
        norm_row(row, is_bf16, w, w_bf16, y, is_bf16, r, dim, eps);
    }
}
