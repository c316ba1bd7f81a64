/* Simulated CUPTI, libcupti.so.13 (no GPU): what its source files share. It is
 * built from cupti.c (errors, the clock, the subscriber, activity kinds, the
 * driver's hooks that make the records), cupti_buffers.c (the client's activity
 * buffers, flushes and the worker thread that delivers them), cupti_pcsampling.c
 * (the PC Sampling API) and cupti_dispatch.c. Not a public header: the symbols below are hidden inside
 * libcupti.so.13. */
#ifndef GPUSIM_CUPTI_INTERNAL_H
#define GPUSIM_CUPTI_INTERNAL_H

#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cupti.h>

#include "cupti_names.h"
#include "gpusim.h"

#define NDOMAINS 8
#define NKINDS 128

/* cupti.c */
/* Sets the thread's last error and returns it. */
CUptiResult fail(CUptiResult r);
/* CUPTI's clock minus CLOCK_MONOTONIC, for the default clock. */
int64_t offset(void);
/* A CLOCK_MONOTONIC time in CUPTI's clock (0 stays 0). */
uint64_t to_cupti(uint64_t mono);
/* A test hook (not CUPTI behaviour): the program's function named by the
 * environment variable `var`, found with dlsym (so the program is linked
 * -rdynamic) at the first call for `h`; NULL when unset or not found. */
typedef void (*sim_hook_fn)(void);
struct sim_hook {
    const char *var;
    sim_hook_fn _Atomic fn;
    atomic_int looked;
};
sim_hook_fn sim_hook(struct sim_hook *h);
/* The number in the environment variable `var` (a simulated fault), or `none`. */
long sim_fault_number(const char *var, long none);
/* The CUptiResult named in the environment variable `var` (a simulated fault),
 * or CUPTI_SUCCESS. */
CUptiResult sim_fault_result(const char *var);
/* Notes a client's flush or disabled kind for gpusim_cupti_events (simulated). */
void sim_event(const char *e);
/* The subscriber's state. */
extern pthread_mutex_t g_mu;
/* Whether the calling thread is inside one of the subscriber's callbacks
 * (resource, state or API-exit). */
int sim_in_callback(void);

/* Delivers a resource callback (`descriptor` as its resourceDescriptor) if the
 * subscriber enabled it. */
void deliver_resource(uint32_t cbid, void *context, void *descriptor);
/* Whether the subscriber enabled that resource callback. */
int resource_enabled(uint32_t cbid);

/* cupti_pcsampling.c */
/* A launch of `kernel` in a context: its module loads (MODULE_LOADED) at the first. */
void pcs_launch(void *context, uint32_t context_id, const char *kernel);
/* A kernel's simulated run: its PC samples, in a context that samples. */
void pcs_kernel(const struct gpusim_op *op);
/* Before a launch's API-exit callbacks: GPUSIM_PC_KERNEL_END_HOOK. */
void pcs_before_exit(void);

/* cupti_buffers.c */
/* The client's buffer-completed callback; NULL until it registers one. */
extern CUpti_BuffersCallbackCompleteFunc g_complete;
/* Appends one record; its end (CUPTI time) says when it is complete. */
void append(const void *rec, size_t size, uint64_t end);
/* Delivers the complete buffers (with `partial`, the current one too; `forced`, all). */
void flush(int forced, int partial);
/* GPUSIM_CUPTI_WORKER_US, or 0. */
long worker_us(void);
/* Take and release CUPTI's lock, the one deliveries hold, where real CUPTI
 * takes it too (resource callbacks, cudaDeviceReset, dropped counts): only
 * with GPUSIM_CUPTI_WORKER_US, no-ops otherwise. */
void cupti_lock(void);
void cupti_unlock(void);
/* Calls the GPUSIM_CUPTI_LOCKED_HOOK function, if any, holding CUPTI's lock. */
void locked_hook(void);

#endif
