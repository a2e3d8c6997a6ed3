/*
 * The opportunistic helper thread of helper.h. An OpenMP region waits at its end for every thread
 * of the team: where another process holds the second core (a drafter beside its verifier and the
 * orchestrator), that wait costs more than the split saves. Here the caller never waits for a
 * helper that has not started: both claim chunks from one counter, and the caller, once none are
 * left, closes the task and waits only for a helper already inside it (at most its last chunk).
 *
 * `state` packs the task's generation (bits 9 and up), CLOSED (bit 8) and the number of helpers
 * inside (bits 0-7): a helper joins with a compare-and-swap that fails once the task is closed or
 * replaced, so a late helper never touches a finished task's arguments. The helper spins briefly
 * between tasks (a drafting step runs dozens of GEMMs a few microseconds apart), then sleeps.
 *
 * A burst (specmesh_helper_busy) is a stretch of work the caller knows is coming, such as a
 * drafting step: the helper is woken at its start, and until its end waits for the next task
 * awake, yielding its core to any other thread that wants it (sched_yield) instead of sleeping.
 * Outside bursts a step's first GEMMs, right after the verifier's forward evicted the drafter's
 * weights from the caches, found the helper asleep and ran on one core from memory.
 */
#include <immintrin.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "helper.h"

#define CLOSED (1ull << 8)
#define INSIDE 0xffull
#define GENERATION_SHIFT 9
#define SPIN_NS 50000 /* how long the helper looks for the next task before it sleeps */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static struct helper_task current; /* the published task, under lock */
static _Atomic uint64_t published;  /* its generation */
static _Atomic uint64_t state;
static _Atomic int64_t next_chunk;
static _Atomic int running;
static _Atomic int64_t helped; /* chunks the helper ran */
static _Atomic int busy;        /* in a burst: the helper waits for tasks awake */

/* Runs chunks until none are left; returns how many. */
static int64_t participate(const struct helper_task *task) {
    int scratch = 0;
    int64_t ran = 0;
    for (int64_t i; (i = atomic_fetch_add(&next_chunk, 1)) < task->chunks; ran++) task->chunk(task->args, i, &scratch);
    if (ran && task->finish) task->finish(&scratch);
    return ran;
}

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Whether `seen` is still the newest generation (no new task) and the helper should keep waiting
 * awake: during a burst (yielding the core), else for SPIN_NS after `since` (pausing). */
static int wait_awake(uint64_t seen, int64_t since) {
    if (atomic_load(&published) != seen) return 0;
    if (atomic_load(&busy)) {
        sched_yield();
        return 1;
    }
    for (int i = 0; i < 32; i++) _mm_pause();
    return now_ns() < since + SPIN_NS;
}

/* The next published generation after `seen`, and its task. */
static uint64_t next_task(uint64_t seen, struct helper_task *task) {
    for (;;) {
        for (int64_t since = now_ns(); wait_awake(seen, since);)
            ;
        pthread_mutex_lock(&lock);
        while (atomic_load(&published) == seen && !atomic_load(&busy)) pthread_cond_wait(&wake, &lock);
        if (atomic_load(&published) != seen) break;
        pthread_mutex_unlock(&lock); /* a burst began: wait awake again */
    }
    uint64_t generation = atomic_load(&published);
    *task = current;
    pthread_mutex_unlock(&lock);
    return generation;
}

static void *helper_main(void *unused) {
    (void)unused;
    struct helper_task task;
    for (uint64_t seen = 0;;) {
        seen = next_task(seen, &task);
        uint64_t s = atomic_load(&state);
        int joined = 0;
        while ((s >> GENERATION_SHIFT) == seen && !(s & CLOSED))
            if ((joined = atomic_compare_exchange_weak(&state, &s, s + 1))) break;
        if (!joined) continue;
        atomic_fetch_add_explicit(&helped, participate(&task), memory_order_relaxed);
        atomic_fetch_sub(&state, 1);
    }
    return NULL;
}

int helper_applies(void) { return atomic_load(&running) && omp_get_max_threads() == 1; }

void helper_run(const struct helper_task *task) {
    pthread_mutex_lock(&lock);
    uint64_t generation = atomic_load(&published) + 1;
    current = *task;
    atomic_store(&next_chunk, 0);
    atomic_store(&state, generation << GENERATION_SHIFT);
    atomic_store(&published, generation);
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&lock);
    participate(task);
    atomic_fetch_or(&state, CLOSED);
    while (atomic_load(&state) & INSIDE) _mm_pause();
}

/* Starts the helper (once per process). Returns 0, or -1 where the thread cannot be created. */
int specmesh_helper_start(void) {
    static pthread_mutex_t starting = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&starting);
    int failed = 0;
    if (!atomic_load(&running)) {
        pthread_t thread;
        failed = pthread_create(&thread, NULL, helper_main, NULL) != 0;
        if (!failed) pthread_detach(thread), atomic_store(&running, 1);
    }
    pthread_mutex_unlock(&starting);
    return failed ? -1 : 0;
}

/* Starts (1) or ends (0) a burst; the helper wakes for a burst's start. */
void specmesh_helper_busy(int on) {
    pthread_mutex_lock(&lock);
    atomic_store(&busy, on);
    if (on) pthread_cond_signal(&wake);
    pthread_mutex_unlock(&lock);
}

/* How many chunks the helper has run in this process (tests, and to see that it helps). */
int64_t specmesh_helper_chunks(void) { return atomic_load(&helped); }
