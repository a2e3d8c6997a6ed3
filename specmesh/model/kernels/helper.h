/* An opportunistic helper thread (helper.c): a process that runs its OpenMP work on one thread,
 * because it shares its cores with busier processes, may still split a kernel's independent
 * chunks with one more thread whenever a core happens to be free, without ever waiting for it. */
#ifndef SPECMESH_KERNELS_HELPER_H
#define SPECMESH_KERNELS_HELPER_H

#include <stdint.h>

struct helper_task {
    /* Runs chunk `index` of `args`; `scratch` is the calling thread's, zeroed before its first chunk. */
    void (*chunk)(const void *args, int64_t index, int *scratch);
    /* Called by each thread that ran chunks, after its last one (NULL: nothing to do). */
    void (*finish)(int *scratch);
    const void *args;
    int64_t chunks;
};

/* Runs every chunk of `task`, on the helper too when it picks the task up in time, else all on the
 * calling thread. Returns when all chunks are done. Chunks must be independent. Only where
 * helper_applies(), from one thread at a time (the process's one OpenMP thread). */
void helper_run(const struct helper_task *task);

/* Whether the helper runs in this process: started by specmesh_helper_start, and OpenMP set to
 * one thread (with more, the kernels' own parallel regions split the work). */
int helper_applies(void);

#endif
