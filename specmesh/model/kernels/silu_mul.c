/* SwiGLU's gate (Shazeer 2020), as Llama's MLP uses it: silu(gate) * up from the fused gate-up
 * projection [rows, 2 * inter] (each row's gate half first) into [rows, inter];
 * silu(g) = g / (1 + exp(-g)) in fp32. In bf16, silu(g) is rounded to bf16 before the product and
 * the product again, as torch's F.silu(gate) * up rounds them. One thread up to 64 rows: in a
 * verify forward the work is a few microseconds, less than waking a second thread. */
#include <math.h>

#include "common.h"

void specmesh_silu_mul(const void *gate_up, int is_bf16, void *out, int64_t rows, int64_t inter) {
#pragma omp parallel for schedule(static) if (rows > 64)
    for (int64_t r = 0; r < rows; r++) {
        int64_t gate = r * 2 * inter, up = gate + inter, dst = r * inter, i = 0;
        for (; i + 8 <= inter; i += 8) {
            __m256 g = load_any(gate_up, is_bf16, gate + i);
            __m256 silu = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), exp256(_mm256_sub_ps(_mm256_setzero_ps(), g))));
            if (is_bf16) silu = round_bf16(silu);
            store_any(out, is_bf16, dst + i, _mm256_mul_ps(silu, load_any(gate_up, is_bf16, up + i)));
        }
        for (; i < inter; i++) {
            float g = load_value(gate_up, is_bf16, gate + i);
            float silu = g / (1.0f + expf(-g));
            if (is_bf16) silu = bf16_rounded(silu);
            store_value(out, is_bf16, dst + i, silu * load_value(gate_up, is_bf16, up + i));
        }
    }
}
