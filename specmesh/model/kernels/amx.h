/* What the AMX kernels share: the tile configuration's layout (palette 1) and whether this process
 * may use AMX (linear_amx.c: the CPU has it and Linux granted the tile state). */
#ifndef SPECMESH_KERNELS_AMX_H
#define SPECMESH_KERNELS_AMX_H

#include <stdint.h>

struct amx_tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t bytes_per_row[16];
    uint8_t rows[16];
};

int specmesh_amx_ready(void);

#endif
