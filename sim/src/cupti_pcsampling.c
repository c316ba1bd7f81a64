/* Simulated CUPTI (no GPU): the PC Sampling API of cupti_pcsampling.h, with samples made up from the simulation; no instruction ever runs or is sampled.
 *
 * What it does, by cupti_pcsampling.h: per-context enable and disable (the
 * stall-reason table is refused before enable, as libcupti 13.0 does), the
 * configuration attributes (sampling period 5..31, stall-reason selection,
 * scratch and hardware buffer sizes, collection mode, start/stop control,
 * output format, the data buffer that cuptiPCSamplingDisable fills, the worker
 * thread's sleep span) with a status per attribute; the stall-reason table;
 * cuptiPCSamplingGetData filling the client's CUpti_PCSamplingData (PC records
 * with cubin CRC, PC offset, function index and name, stall reasons, and in
 * kernel-serialized mode the launch's correlation id; totalNumPcs,
 * remainingNumPcs, rangeId, totalSamples, droppedSamples, hardwareBufferFull);
 * cuptiGetCubinCrc, cuptiGetSassToSourceCorrelation; the module-loaded resource
 * callback, made at a kernel's first launch in a context as lazy loading does.
 *
 * Where the samples come from (simulated, documented in sim/README.md): each
 * kernel launch in a sampled context gives
 *   busy sub-partitions x (duration in SM cycles >> sampling period)
 * samples, busy sub-partitions = min(warps of the launch, 4 x SMs), spread over
 * the kernel's PC table (GPUSIM_PC_SAMPLES) in proportion to the weights, by
 * largest remainder. A kernel's "module" is a small text image, not a cubin.
 *
 * In KERNEL_SERIALIZED mode each kernel's end, and with start/stop control each
 * cuptiPCSamplingStop, writes the records into the buffer given at
 * configuration (SAMPLING_DATA_BUFFER), replacing what it held, as libcupti
 * 13.0 did on an H200 for serialized kernels; without that buffer they wait
 * for GetData.
 *
 * What it does not do: serialize kernels in KERNEL_SERIALIZED mode (the
 * simulated timing is unchanged), sample non-user kernels, real cubins (a
 * cuptiGetSassToSourceCorrelation on one is CUPTI_ERROR_INVALID_MODULE),
 * cuptiRegisterComputeCrcCallback (accepted, never called), the worker thread. */
#include "cupti_internal.h"

#include <stdio.h>

#include <cupti_pcsampling.h>

/* ------------------------------------------------------------------ stall reasons */

/* The simulated table. Indices are not positions, as with real CUPTI, whose
 * indices vary by GPU: a client must use the indices it is given. */
static const struct {
    uint32_t index;
    const char *name;
} REASONS[] = {
    {1, "smsp__pcsamp_warps_issue_stalled_barrier"},
    {2, "smsp__pcsamp_warps_issue_stalled_branch_resolving"},
    {4, "smsp__pcsamp_warps_issue_stalled_dispatch_stall"},
    {5, "smsp__pcsamp_warps_issue_stalled_drain"},
    {6, "smsp__pcsamp_warps_issue_stalled_imc_miss"},
    {7, "smsp__pcsamp_warps_issue_stalled_lg_throttle"},
    {8, "smsp__pcsamp_warps_issue_stalled_long_scoreboard"},
    {9, "smsp__pcsamp_warps_issue_stalled_math_pipe_throttle"},
    {10, "smsp__pcsamp_warps_issue_stalled_membar"},
    {11, "smsp__pcsamp_warps_issue_stalled_mio_throttle"},
    {12, "smsp__pcsamp_warps_issue_stalled_misc"},
    {13, "smsp__pcsamp_warps_issue_stalled_no_instructions"},
    {14, "smsp__pcsamp_warps_issue_stalled_not_selected"},
    {15, "smsp__pcsamp_warps_issue_stalled_selected"},
    {16, "smsp__pcsamp_warps_issue_stalled_short_scoreboard"},
    {17, "smsp__pcsamp_warps_issue_stalled_sleeping"},
    {18, "smsp__pcsamp_warps_issue_stalled_tex_throttle"},
    {19, "smsp__pcsamp_warps_issue_stalled_wait"},
    /* The not-issued counts, as on Hopper: each is the part of its base
       reason's samples taken on cycles that issued no instruction (Nsight
       Compute's "Not-issued Samples"), a subset, not more samples. */
    {101, "smsp__pcsamp_warps_issue_stalled_barrier_not_issued"},
    {102, "smsp__pcsamp_warps_issue_stalled_branch_resolving_not_issued"},
    {104, "smsp__pcsamp_warps_issue_stalled_dispatch_stall_not_issued"},
    {105, "smsp__pcsamp_warps_issue_stalled_drain_not_issued"},
    {106, "smsp__pcsamp_warps_issue_stalled_imc_miss_not_issued"},
    {107, "smsp__pcsamp_warps_issue_stalled_lg_throttle_not_issued"},
    {108, "smsp__pcsamp_warps_issue_stalled_long_scoreboard_not_issued"},
    {109, "smsp__pcsamp_warps_issue_stalled_math_pipe_throttle_not_issued"},
    {110, "smsp__pcsamp_warps_issue_stalled_membar_not_issued"},
    {111, "smsp__pcsamp_warps_issue_stalled_mio_throttle_not_issued"},
    {112, "smsp__pcsamp_warps_issue_stalled_misc_not_issued"},
    {113, "smsp__pcsamp_warps_issue_stalled_no_instructions_not_issued"},
    {116, "smsp__pcsamp_warps_issue_stalled_short_scoreboard_not_issued"},
    {117, "smsp__pcsamp_warps_issue_stalled_sleeping_not_issued"},
    {118, "smsp__pcsamp_warps_issue_stalled_tex_throttle_not_issued"},
    {119, "smsp__pcsamp_warps_issue_stalled_wait_not_issued"},
};
#define NREASONS (sizeof REASONS / sizeof REASONS[0])
#define NOT_ISSUED_SUFFIX "_not_issued"

/* The slot of the not-issued count of the reason in `slot`, or -1. */
static int not_issued_slot(int slot) {
    const char *base = REASONS[slot].name;
    size_t n = strlen(base);
    for (size_t i = 0; i < NREASONS; i++)
        if (strlen(REASONS[i].name) == n + strlen(NOT_ISSUED_SUFFIX) && !strncmp(REASONS[i].name, base, n) &&
            !strcmp(REASONS[i].name + n, NOT_ISSUED_SUFFIX))
            return (int)i;
    return -1;
}
#define PREFIX "smsp__pcsamp_warps_issue_stalled_"

static int reason_slot(uint32_t index) {
    for (size_t i = 0; i < NREASONS; i++)
        if (REASONS[i].index == index)
            return (int)i;
    return -1;
}

static int reason_by_short_name(const char *s, size_t n) {
    for (size_t i = 0; i < NREASONS; i++) {
        const char *short_name = REASONS[i].name + strlen(PREFIX);
        if (strlen(short_name) == n && !memcmp(short_name, s, n))
            return (int)i;
    }
    return -1;
}

/* ------------------------------------------------------------------ PC tables */

/* GPUSIM_PC_SAMPLES="KERNEL[@FILE]=OFFSET:LINE:REASON:WEIGHT[,...][;KERNEL...]" */
struct pc_line {
    uint64_t offset;
    uint32_t line;
    int slot; /* in REASONS */
    uint32_t weight;
};
struct pc_table {
    char *kernel;
    char *file; /* NULL: the module has no line information */
    struct pc_line *lines;
    size_t n;
};
static struct pc_table *g_tables;
static size_t g_ntables;
static pthread_once_t g_tables_once = PTHREAD_ONCE_INIT;
/* A kernel without an entry: one PC, no line, every sample "selected". */
static struct pc_line DEFAULT_LINE = {0, 0, 13, 1};

static void parse_tables(void) {
    const char *spec = getenv("GPUSIM_PC_SAMPLES");
    if (!spec || !*spec)
        return;
    char *copy = strdup(spec), *save = NULL;
    for (char *entry = strtok_r(copy, ";", &save); entry; entry = strtok_r(NULL, ";", &save)) {
        char *eq = strchr(entry, '=');
        if (!eq)
            continue;
        *eq = 0;
        struct pc_table t = {0};
        char *at = strchr(entry, '@');
        if (at) {
            *at = 0;
            t.file = strdup(at + 1);
        }
        t.kernel = strdup(entry);
        char *save2 = NULL;
        for (char *l = strtok_r(eq + 1, ",", &save2); l; l = strtok_r(NULL, ",", &save2)) {
            char *f[4];
            int nf = 0;
            for (char *p = l; nf < 4; nf++) {
                f[nf] = p;
                p = strchr(p, ':');
                if (!p) {
                    nf++;
                    break;
                }
                *p++ = 0;
            }
            int slot = nf == 4 ? reason_by_short_name(f[2], strlen(f[2])) : -1;
            if (slot < 0)
                continue; /* malformed: ignored, as an unknown kernel is */
            t.lines = realloc(t.lines, (t.n + 1) * sizeof *t.lines);
            t.lines[t.n++] = (struct pc_line){strtoull(f[0], NULL, 0), (uint32_t)strtoul(f[1], NULL, 0),
                                              slot, (uint32_t)strtoul(f[3], NULL, 0)};
        }
        g_tables = realloc(g_tables, (g_ntables + 1) * sizeof *g_tables);
        g_tables[g_ntables++] = t;
    }
    free(copy);
}

static const struct pc_table *table_of(const char *kernel) {
    pthread_once(&g_tables_once, parse_tables);
    for (size_t i = 0; i < g_ntables; i++)
        if (!strcmp(g_tables[i].kernel, kernel))
            return &g_tables[i];
    return NULL;
}

/* ------------------------------------------------------------------ simulated modules */

/* A kernel's module: "GPUSIM-CUBIN 1\nfunction NAME\n[file PATH\nline OFFSET LINE\n...]". */
#define MAGIC "GPUSIM-CUBIN 1\n"

static char *module_image(const char *kernel, size_t *size) {
    const struct pc_table *t = table_of(kernel);
    size_t cap = 64 + strlen(kernel) + (t && t->file ? strlen(t->file) + t->n * 48 : 0);
    char *img = malloc(cap);
    int n = snprintf(img, cap, MAGIC "function %s\n", kernel);
    if (t && t->file) {
        n += snprintf(img + n, cap - (size_t)n, "file %s\n", t->file);
        for (size_t i = 0; i < t->n; i++)
            n += snprintf(img + n, cap - (size_t)n, "line %llu %u\n",
                          (unsigned long long)t->lines[i].offset, t->lines[i].line);
    }
    *size = (size_t)n;
    return img;
}

/* CRC-64/ECMA-182 (simulated: real CUPTI's algorithm is not documented). */
static uint64_t crc64(const void *data, size_t n) {
    const unsigned char *p = data;
    uint64_t crc = 0;
    for (size_t i = 0; i < n; i++) {
        crc ^= (uint64_t)p[i] << 56;
        for (int b = 0; b < 8; b++)
            crc = crc & (1ull << 63) ? (crc << 1) ^ 0x42F0E1EBA9EA3693ull : crc << 1;
    }
    return crc;
}

/* GPUSIM_PC_MODULE_CALLS_LOCK=1 (a simulated hazard): `call` takes CUPTI's
 * lock, which CUPTI holds across its callbacks, so that a call made inside
 * one would wait for itself: reported and aborted, not hung. */
static void module_call(const char *call) {
    if (sim_fault_number("GPUSIM_PC_MODULE_CALLS_LOCK", 0) == 1 && sim_in_callback()) {
        fprintf(stderr, "gpusim: %s inside a CUPTI callback: deadlock (simulated CUPTI)\n", call);
        abort();
    }
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiGetCubinCrc(CUpti_GetCubinCrcParams *p) {
    module_call("cuptiGetCubinCrc");
    if (!p || p->size < CUpti_GetCubinCrcParamsSize || !p->cubin || !p->cubinSize)
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    p->cubinCrc = crc64(p->cubin, p->cubinSize);
    return CUPTI_SUCCESS;
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiRegisterComputeCrcCallback(CUpti_ComputeCrcCallbackFunc f) {
    return f ? CUPTI_SUCCESS : fail(CUPTI_ERROR_INVALID_PARAMETER);
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiGetSassToSourceCorrelation(CUpti_GetSassToSourceCorrelationParams *p) {
    module_call("cuptiGetSassToSourceCorrelation");
    if (!p || p->size < CUpti_GetSassToSourceCorrelationParamsSize || !p->cubin || !p->functionName ||
        !p->cubinSize)
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    const char *img = p->cubin, *end = img + p->cubinSize;
    if (p->cubinSize < strlen(MAGIC) || memcmp(img, MAGIC, strlen(MAGIC)))
        return fail(CUPTI_ERROR_INVALID_MODULE);
    char *text = strndup(img, p->cubinSize);
    char func[1024] = "", file[4096] = "";
    uint64_t best = 0;
    uint32_t line = 0;
    int found = 0;
    (void)end;
    for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        unsigned long long off;
        unsigned ln;
        if (!strncmp(l, "function ", 9))
            snprintf(func, sizeof func, "%s", l + 9);
        else if (!strncmp(l, "file ", 5))
            snprintf(file, sizeof file, "%s", l + 5);
        else if (sscanf(l, "line %llu %u", &off, &ln) == 2 && off <= p->pcOffset && (!found || off >= best))
            best = off, line = ln, found = 1;
    }
    free(text);
    /* CUPTI_ERROR_UNKNOWN "is also used for cases when the function is not
       present in the module". */
    if (strcmp(func, p->functionName))
        return fail(CUPTI_ERROR_UNKNOWN);
    /* Without line information (simulated): success, line 0, empty names. */
    char *slash = strrchr(file, '/');
    p->lineNumber = *file ? line : 0;
    p->fileName = strdup(slash ? slash + 1 : file);
    if (slash) {
        *slash = 0;
        p->dirName = strdup(*file ? file : "/");
    } else {
        p->dirName = strdup("");
    }
    return CUPTI_SUCCESS;
}

/* ------------------------------------------------------------------ per-context state */

struct pc_record {
    uint32_t correlation; /* 0 in continuous mode */
    uint64_t crc;
    const char *function; /* interned, never freed */
    uint64_t offset;
    uint64_t range;
    uint32_t samples[NREASONS];
};

struct pcs {
    CUcontext ctx;
    uint32_t id;
    int enabled;
    uint32_t period;
    unsigned char selected[NREASONS];
    size_t scratch, hw_buffer;
    int mode, start_stop, started;
    uint32_t sleep_span;
    CUpti_PCSamplingData *disable_buffer;
    uint64_t range; /* with start/stop control: the current range's id */
    struct pc_record *recs;
    size_t nrecs;
    size_t scratch_used;
    /* Samples and dropped samples of the ranges not yet read, oldest first. */
    struct range_totals {
        uint64_t range, total, dropped;
    } *totals;
    size_t ntotals;
    int hw_full;
    /* After a full hardware buffer, no more samples until Disable and Enable
       (not documented: parcagpu saw it on real GPUs, where Stop and Start
       did not help). */
    int wedged;
    /* The functionName each function's records carry: one allocation per
       function while sampling is enabled, shared by all its records, as
       cupti_pcsampling.h allows ("might be shared across all the records"):
       the client frees each once, after its last read. */
    struct shared_name {
        const char *function;
        char *name;
    } *names;
    size_t nnames;
};

static char *shared_name(struct pcs *s, const char *function) {
    for (size_t i = 0; i < s->nnames; i++)
        if (s->names[i].function == function)
            return s->names[i].name;
    struct shared_name *grown = realloc(s->names, (s->nnames + 1) * sizeof *grown);
    if (!grown)
        return strdup(function);
    s->names = grown;
    s->names[s->nnames] = (struct shared_name){function, strdup(function)};
    return s->names[s->nnames++].name;
}

static struct range_totals *totals_of(struct pcs *s, uint64_t range) {
    for (size_t i = 0; i < s->ntotals; i++)
        if (s->totals[i].range == range)
            return &s->totals[i];
    s->totals = realloc(s->totals, (s->ntotals + 1) * sizeof *s->totals);
    s->totals[s->ntotals] = (struct range_totals){range, 0, 0};
    return &s->totals[s->ntotals++];
}

#define MAX_CTX 64
static struct pcs g_pcs[MAX_CTX];
static pthread_mutex_t g_pcs_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int g_sampling; /* contexts with PC sampling enabled */
static uint64_t g_kernels_sampled; /* under g_pcs_mu */
/* Bytes one sample takes in the simulated hardware buffer. */
#define HW_BYTES_PER_SAMPLE 32
#define DEFAULT_PERIOD 8

static struct pcs *find(CUcontext ctx) {
    for (int i = 0; i < MAX_CTX; i++)
        if (g_pcs[i].enabled && g_pcs[i].ctx == ctx)
            return &g_pcs[i];
    return NULL;
}

static struct pcs *find_id(uint32_t id) {
    for (int i = 0; i < MAX_CTX; i++)
        if (g_pcs[i].enabled && g_pcs[i].id == id)
            return &g_pcs[i];
    return NULL;
}

static void defaults(struct pcs *s) {
    s->period = DEFAULT_PERIOD;
    memset(s->selected, 1, sizeof s->selected);
    s->scratch = 1 << 20;
    s->hw_buffer = 512u << 20;
    s->mode = CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS;
    s->sleep_span = 100;
}

static size_t reasons_in(const struct pcs *s, const struct pc_record *r) {
    size_t n = 0;
    for (size_t i = 0; i < NREASONS; i++)
        n += s->selected[i] && r->samples[i];
    return n;
}

/* "Approximately it takes 16 Bytes (and some fixed size memory) to accommodate
   one PC with one stall reason." */
static size_t scratch_bytes(size_t reasons) { return 16 + 16 * reasons; }

#define PARAMS_OK(p, T) ((p) && (p)->size >= T##Size && (p)->ctx)

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiPCSamplingEnable(CUpti_PCSamplingEnableParams *p) {
    uint32_t id;
    if (!PARAMS_OK(p, CUpti_PCSamplingEnableParams) || gpusim_context_info(p->ctx, &id, NULL))
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    const char *priv = getenv("GPUSIM_PC_SAMPLING_PRIVILEGE");
    if (priv && !strcmp(priv, "0"))
        return fail(CUPTI_ERROR_INSUFFICIENT_PRIVILEGES);
    pthread_mutex_lock(&g_pcs_mu);
    CUptiResult r = CUPTI_ERROR_OUT_OF_MEMORY;
    if (find(p->ctx)) {
        r = CUPTI_ERROR_INVALID_OPERATION;
    } else {
        for (int i = 0; i < MAX_CTX; i++)
            if (!g_pcs[i].enabled) {
                memset(&g_pcs[i], 0, sizeof g_pcs[i]);
                g_pcs[i].ctx = p->ctx;
                g_pcs[i].id = id;
                g_pcs[i].enabled = 1;
                defaults(&g_pcs[i]);
                atomic_fetch_add(&g_sampling, 1);
                r = CUPTI_SUCCESS;
                break;
            }
    }
    pthread_mutex_unlock(&g_pcs_mu);
    return r == CUPTI_SUCCESS ? r : fail(r);
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiPCSamplingGetNumStallReasons(CUpti_PCSamplingGetNumStallReasonsParams *p) {
    if (!PARAMS_OK(p, CUpti_PCSamplingGetNumStallReasonsParams) || !p->numStallReasons ||
        gpusim_context_info(p->ctx, NULL, NULL))
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    /* As libcupti 13.0 answered on an H200: the table of a context where
       sampling is not enabled is refused. */
    pthread_mutex_lock(&g_pcs_mu);
    int enabled = find(p->ctx) != NULL;
    pthread_mutex_unlock(&g_pcs_mu);
    if (!enabled)
        return fail(CUPTI_ERROR_INVALID_OPERATION);
    *p->numStallReasons = NREASONS;
    return CUPTI_SUCCESS;
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiPCSamplingGetStallReasons(CUpti_PCSamplingGetStallReasonsParams *p) {
    if (!PARAMS_OK(p, CUpti_PCSamplingGetStallReasonsParams) || !p->stallReasonIndex || !p->stallReasons ||
        gpusim_context_info(p->ctx, NULL, NULL))
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    pthread_mutex_lock(&g_pcs_mu);
    int enabled = find(p->ctx) != NULL;
    pthread_mutex_unlock(&g_pcs_mu);
    if (!enabled)
        return fail(CUPTI_ERROR_INVALID_OPERATION);
    for (size_t i = 0; i < p->numStallReasons && i < NREASONS; i++) {
        p->stallReasonIndex[i] = REASONS[i].index;
        /* Each name buffer holds CUPTI_STALL_REASON_STRING_SIZE bytes. */
        snprintf(p->stallReasons[i], CUPTI_STALL_REASON_STRING_SIZE, "%s", REASONS[i].name);
    }
    return CUPTI_SUCCESS;
}

static CUptiResult set_one(struct pcs *s, CUpti_PCSamplingConfigurationInfo *a) {
    switch (a->attributeType) {
    case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD: {
        uint32_t v = a->attributeData.samplingPeriodData.samplingPeriod;
        if (v < 5 || v > 31)
            return CUPTI_ERROR_INVALID_OPERATION;
        s->period = v;
        return CUPTI_SUCCESS;
    }
    case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_STALL_REASON: {
        size_t n = a->attributeData.stallReasonData.stallReasonCount;
        const uint32_t *idx = a->attributeData.stallReasonData.pStallReasonIndex;
        if (!n || !idx)
            return CUPTI_ERROR_INVALID_OPERATION;
        unsigned char sel[NREASONS] = {0};
        for (size_t i = 0; i < n; i++) {
            int slot = reason_slot(idx[i]);
            if (slot < 0)
                return CUPTI_ERROR_INVALID_OPERATION;
            sel[slot] = 1;
        }
        memcpy(s->selected, sel, sizeof sel);
        return CUPTI_SUCCESS;
    }
    case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SCRATCH_BUFFER_SIZE:
        if (!a->attributeData.scratchBufferSizeData.scratchBufferSize)
            return CUPTI_ERROR_INVALID_OPERATION;
        s->scratch = a->attributeData.scratchBufferSizeData.scratchBufferSize;
        return CUPTI_SUCCESS;
    case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_HARDWARE_BUFFER_SIZE:
        if (!a->attributeData.hardwareBufferSizeData.hardwareBufferSize)
            return CUPTI_ERROR_INVALID_OPERATION;
        s->hw_buffer = a->attributeData.hardwareBufferSizeData.hardwareBufferSize;
        return CUPTI_SUCCESS;
    case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE: {
        int m = a->attributeData.collectionModeData.collectionMode;
        if (m != CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS &&
            m != CUPTI_PC_SAMPLING_COLLECTION_MODE_KERNEL_SERIALIZED)
            return CUPTI_ERROR_INVALID_OPERATION;
        s->mode = m;
        return CUPTI_SUCCESS;
    }
    case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_ENABLE_START_STOP_CONTROL:
        s->start_stop = a->attributeData.enableStartStopControlData.enableStartStopControl != 0;
        return CUPTI_SUCCESS;
    case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_OUTPUT_DATA_FORMAT:
        return a->attributeData.outputDataFormatData.outputDataFormat == CUPTI_PC_SAMPLING_OUTPUT_DATA_FORMAT_PARSED
                   ? CUPTI_SUCCESS
                   : CUPTI_ERROR_INVALID_OPERATION;
    case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER:
        s->disable_buffer = a->attributeData.samplingDataBufferData.samplingDataBuffer;
        return CUPTI_SUCCESS;
    case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_WORKER_THREAD_PERIODIC_SLEEP_SPAN:
        s->sleep_span = a->attributeData.workerThreadPeriodicSleepSpanData.workerThreadPeriodicSleepSpan;
        return CUPTI_SUCCESS;
    default: return CUPTI_ERROR_INVALID_PARAMETER;
    }
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiPCSamplingSetConfigurationAttribute(
    CUpti_PCSamplingConfigurationInfoParams *p) {
    if (!PARAMS_OK(p, CUpti_PCSamplingConfigurationInfoParams) ||
        (p->numAttributes && !p->pPCSamplingConfigurationInfo))
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    pthread_mutex_lock(&g_pcs_mu);
    struct pcs *s = find(p->ctx);
    CUptiResult r = s ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_OPERATION;
    for (size_t i = 0; s && i < p->numAttributes; i++) {
        CUpti_PCSamplingConfigurationInfo *a = &p->pPCSamplingConfigurationInfo[i];
        a->attributeStatus = set_one(s, a);
        if (a->attributeStatus != CUPTI_SUCCESS && r == CUPTI_SUCCESS)
            r = a->attributeStatus;
    }
    pthread_mutex_unlock(&g_pcs_mu);
    return r == CUPTI_SUCCESS ? r : fail(r);
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiPCSamplingGetConfigurationAttribute(
    CUpti_PCSamplingConfigurationInfoParams *p) {
    if (!PARAMS_OK(p, CUpti_PCSamplingConfigurationInfoParams) ||
        (p->numAttributes && !p->pPCSamplingConfigurationInfo) || gpusim_context_info(p->ctx, NULL, NULL))
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    pthread_mutex_lock(&g_pcs_mu);
    struct pcs d, *s = find(p->ctx);
    if (!s) {
        memset(&d, 0, sizeof d);
        defaults(&d);
        s = &d;
    }
    CUptiResult r = CUPTI_SUCCESS;
    for (size_t i = 0; i < p->numAttributes; i++) {
        CUpti_PCSamplingConfigurationInfo *a = &p->pPCSamplingConfigurationInfo[i];
        a->attributeStatus = CUPTI_SUCCESS;
        switch (a->attributeType) {
        case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD:
            a->attributeData.samplingPeriodData.samplingPeriod = s->period;
            break;
        case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SCRATCH_BUFFER_SIZE:
            a->attributeData.scratchBufferSizeData.scratchBufferSize = s->scratch;
            break;
        case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_HARDWARE_BUFFER_SIZE:
            a->attributeData.hardwareBufferSizeData.hardwareBufferSize = s->hw_buffer;
            break;
        case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE:
            a->attributeData.collectionModeData.collectionMode = (CUpti_PCSamplingCollectionMode)s->mode;
            break;
        case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_ENABLE_START_STOP_CONTROL:
            a->attributeData.enableStartStopControlData.enableStartStopControl = (uint32_t)s->start_stop;
            break;
        case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_WORKER_THREAD_PERIODIC_SLEEP_SPAN:
            a->attributeData.workerThreadPeriodicSleepSpanData.workerThreadPeriodicSleepSpan = s->sleep_span;
            break;
        case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_STALL_REASON:
        case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_OUTPUT_DATA_FORMAT:
        case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER:
            a->attributeStatus = CUPTI_ERROR_INVALID_OPERATION; /* [w] only */
            break;
        default: a->attributeStatus = CUPTI_ERROR_INVALID_PARAMETER;
        }
        if (a->attributeStatus != CUPTI_SUCCESS && r == CUPTI_SUCCESS)
            r = a->attributeStatus;
    }
    pthread_mutex_unlock(&g_pcs_mu);
    return r == CUPTI_SUCCESS ? r : fail(r);
}

static CUptiResult copy_out(struct pcs *s, CUpti_PCSamplingData *d, int keep);

/* A range ended: its records go into the buffer given at configuration,
 * replacing what it held. With GPUSIM_PC_RANGE_END_KEEPS=1 (simulated, for
 * tests: which of the two libcupti does is not documented) they are also
 * kept for cuptiPCSamplingGetData, as if that buffer were a copy. Called with
 * g_pcs_mu held. */
static void range_end(struct pcs *s) {
    if (s->disable_buffer)
        (void)copy_out(s, s->disable_buffer, sim_fault_number("GPUSIM_PC_RANGE_END_KEEPS", 0) == 1);
}

static CUptiResult start_stop(CUcontext ctx, int start) {
    pthread_mutex_lock(&g_pcs_mu);
    struct pcs *s = find(ctx);
    CUptiResult r = CUPTI_ERROR_INVALID_OPERATION;
    if (s && s->start_stop && s->started != start) {
        s->started = start;
        if (!start) {
            /* A range ends: as at a serialized kernel's end, its records go
               into the buffer given at configuration, replacing what it held
               (cupti_pcsampling.h: flushing is required after every range end). */
            range_end(s);
            s->range++;
        }
        r = CUPTI_SUCCESS;
    }
    pthread_mutex_unlock(&g_pcs_mu);
    return r == CUPTI_SUCCESS ? r : fail(r);
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiPCSamplingStart(CUpti_PCSamplingStartParams *p) {
    if (!PARAMS_OK(p, CUpti_PCSamplingStartParams))
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    return start_stop(p->ctx, 1);
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiPCSamplingStop(CUpti_PCSamplingStopParams *p) {
    if (!PARAMS_OK(p, CUpti_PCSamplingStopParams))
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    return start_stop(p->ctx, 0);
}

/* Moves up to collectNumPcs records of the oldest range into the client's
 * buffer (copies them, with `keep`). Called with g_pcs_mu held. */
static CUptiResult copy_out(struct pcs *s, CUpti_PCSamplingData *d, int keep) {
    if (d->size < CUPTI_PCSAMPLING_STRUCT_SIZE(CUpti_PCSamplingData, pPcData) ||
        (d->collectNumPcs && !d->pPcData))
        return CUPTI_ERROR_INVALID_PARAMETER;
    int full = s->hw_full;
    d->rangeId = s->nrecs ? s->recs[0].range : s->ntotals ? s->totals[0].range : s->range;
    d->totalSamples = d->droppedSamples = 0;
    if (s->ntotals && s->totals[0].range == d->rangeId) {
        d->totalSamples = s->totals[0].total;
        d->droppedSamples = s->totals[0].dropped;
        if (!keep)
            memmove(s->totals, s->totals + 1, --s->ntotals * sizeof *s->totals);
    }
    if (d->size >= CUPTI_PCSAMPLING_STRUCT_SIZE(CUpti_PCSamplingData, nonUsrKernelsTotalSamples))
        d->nonUsrKernelsTotalSamples = 0;
    if (d->size >= CUPTI_PCSAMPLING_STRUCT_SIZE(CUpti_PCSamplingData, hardwareBufferFull))
        d->hardwareBufferFull = (uint8_t)full;
    if (!keep)
        s->hw_full = 0;
    size_t n = 0;
    /* "When hardware buffer is full, user will get pc data as 0." */
    while (!full && n < d->collectNumPcs && n < s->nrecs && s->recs[n].range == d->rangeId) {
        const struct pc_record *r = &s->recs[n];
        CUpti_PCSamplingPCData *o = &d->pPcData[n];
        o->cubinCrc = r->crc;
        o->pcOffset = r->offset;
        o->functionIndex = 0;
        o->functionName = shared_name(s, r->function);
        size_t k = 0;
        /* The client allocated stallReason for every selected stall reason. */
        for (size_t i = 0; i < NREASONS; i++)
            if (s->selected[i] && r->samples[i] && o->stallReason) {
                o->stallReason[k].pcSamplingStallReasonIndex = REASONS[i].index;
                o->stallReason[k].samples = r->samples[i];
                k++;
            }
        o->stallReasonCount = k;
        if (o->size >= CUPTI_PCSAMPLING_STRUCT_SIZE(CUpti_PCSamplingPCData, correlationId))
            o->correlationId = r->correlation;
        if (!keep)
            s->scratch_used -= scratch_bytes(reasons_in(s, r));
        n++;
    }
    d->totalNumPcs = n;
    size_t left = n;
    while (left < s->nrecs && s->recs[left].range == d->rangeId)
        left++;
    d->remainingNumPcs = left - n;
    if (!keep) {
        memmove(s->recs, s->recs + n, (s->nrecs - n) * sizeof *s->recs);
        s->nrecs -= n;
    }
    return full ? CUPTI_ERROR_OUT_OF_MEMORY : CUPTI_SUCCESS;
}

/* A call on a context that is destroyed, or was destroyed during the call:
 * with real CUPTI, a use of freed state. The simulation says so on stderr
 * (tests look for the line) and refuses the call. */
static int dead_context(CUcontext ctx, const char *call) {
    if (!gpusim_context_info(ctx, NULL, NULL))
        return 0;
    fprintf(stderr, "gpusim: %s on a destroyed context (simulated CUPTI)\n", call);
    return 1;
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiPCSamplingGetData(CUpti_PCSamplingGetDataParams *p) {
    if (!PARAMS_OK(p, CUpti_PCSamplingGetDataParams) || !p->pcSamplingData)
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    /* Test knob (simulated): each call takes this long, so that a test can
       destroy the context while another thread is inside one. */
    const char *delay = getenv("GPUSIM_PC_GETDATA_DELAY_MS");
    if (delay && *delay)
        usleep((useconds_t)strtoul(delay, NULL, 10) * 1000);
    if (dead_context(p->ctx, "cuptiPCSamplingGetData"))
        return fail(CUPTI_ERROR_INVALID_CONTEXT);
    pthread_mutex_lock(&g_pcs_mu);
    struct pcs *s = find(p->ctx);
    CUptiResult r = s ? copy_out(s, p->pcSamplingData, 0) : CUPTI_ERROR_INVALID_OPERATION;
    pthread_mutex_unlock(&g_pcs_mu);
    return r == CUPTI_SUCCESS ? r : fail(r);
}

GPUSIM_EXPORT CUptiResult CUPTIAPI cuptiPCSamplingDisable(CUpti_PCSamplingDisableParams *p) {
    if (!PARAMS_OK(p, CUpti_PCSamplingDisableParams))
        return fail(CUPTI_ERROR_INVALID_PARAMETER);
    if (dead_context(p->ctx, "cuptiPCSamplingDisable"))
        return fail(CUPTI_ERROR_INVALID_CONTEXT);
    /* Simulated hazard, not documented: the call stays inside for this many
       seconds, as in a driver that stopped answering. */
    long hang = sim_fault_number("GPUSIM_PC_DISABLE_HANG_S", 0);
    for (struct timespec t = {.tv_sec = hang}; hang > 0 && nanosleep(&t, &t) != 0;)
        ;
    pthread_mutex_lock(&g_pcs_mu);
    struct pcs *s = find(p->ctx);
    if (!s) {
        pthread_mutex_unlock(&g_pcs_mu);
        return fail(CUPTI_ERROR_INVALID_OPERATION);
    }
    /* "copies PC records in the buffer provided during the PC sampling
       configuration. PC records which can't be accommodated in the buffer are
       discarded." */
    if (s->disable_buffer)
        (void)copy_out(s, s->disable_buffer, 0);
    free(s->recs);
    free(s->totals);
    free(s->names); /* the names themselves are the client's */
    memset(s, 0, sizeof *s);
    atomic_fetch_sub(&g_sampling, 1);
    pthread_mutex_unlock(&g_pcs_mu);
    return CUPTI_SUCCESS;
}

/* ------------------------------------------------------------------ the simulation's hooks */

static const char *intern(const char *name) {
    static char **names;
    static size_t n;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(names[i], name))
            return names[i];
    names = realloc(names, (n + 1) * sizeof *names);
    return names[n++] = strdup(name);
}

/* Kernels whose module was announced, by context id. */
static struct loaded {
    uint32_t ctx;
    const char *name;
    char *image;
    size_t size;
    uint64_t crc;
} *g_loaded;
static size_t g_nloaded;

/* The module of `kernel` in context `ctx_id`, made (and announced through
 * `announce` when non-NULL) at its first use. Called with g_pcs_mu held. */
static struct loaded *module_of(uint32_t ctx_id, const char *kernel, int *fresh) {
    for (size_t i = 0; i < g_nloaded; i++)
        if (g_loaded[i].ctx == ctx_id && !strcmp(g_loaded[i].name, kernel))
            return &g_loaded[i];
    g_loaded = realloc(g_loaded, (g_nloaded + 1) * sizeof *g_loaded);
    struct loaded *m = &g_loaded[g_nloaded++];
    m->ctx = ctx_id;
    m->name = intern(kernel);
    m->image = module_image(kernel, &m->size);
    m->crc = crc64(m->image, m->size);
    /* GPUSIM_PC_RECORD_CRC_DIFFERS=1 (a simulated hazard): the PC records name
       the module by a CRC that its MODULE_LOADED cubin does not have. */
    if (sim_fault_number("GPUSIM_PC_RECORD_CRC_DIFFERS", 0) == 1)
        m->crc ^= 1;
    *fresh = 1;
    return m;
}

void pcs_launch(void *context, uint32_t context_id, const char *kernel) {
    /* Nothing to do for a launch unless someone listens, as the modules are
       only made up for PC sampling and its clients. */
    if (!kernel || !context ||
        (!resource_enabled(CUPTI_CBID_RESOURCE_MODULE_LOADED) && !atomic_load(&g_sampling)))
        return;
    int fresh = 0;
    pthread_mutex_lock(&g_pcs_mu);
    struct loaded *m = module_of(context_id, kernel, &fresh);
    CUpti_ModuleResourceData md = {.moduleId = (uint32_t)(m - g_loaded) + 1, .cubinSize = m->size,
                                   .pCubin = m->image};
    pthread_mutex_unlock(&g_pcs_mu);
    /* Lazy loading: the module loads inside the first launch that needs it. */
    if (fresh)
        deliver_resource(CUPTI_CBID_RESOURCE_MODULE_LOADED, context, &md);
}

/* GPUSIM_PC_NOT_ISSUED_PERCENT: the share of each sample count also given to
   its reason's not-issued count (0 unless set). */
static uint64_t not_issued_percent(void) {
    long v = sim_fault_number("GPUSIM_PC_NOT_ISSUED_PERCENT", 0);
    return v < 0 ? 0 : v > 100 ? 100 : (uint64_t)v;
}

static uint64_t kernel_samples(const struct pcs *s, const struct gpusim_op *op) {
    const struct gpusim_device_info *f = gpusim_device_info((int)op->device);
    uint64_t threads = (uint64_t)op->block[0] * op->block[1] * op->block[2];
    uint64_t warps = (uint64_t)op->grid[0] * op->grid[1] * op->grid[2] * ((threads + 31) / 32);
    uint64_t smsp = 4ull * f->multiprocessors;
    uint64_t busy = warps < smsp ? warps : smsp;
    uint64_t cycles = (op->end_ns - op->start_ns) * f->clock_khz / 1000000;
    return busy * (cycles >> s->period);
}

static struct pc_record *record_for(struct pcs *s, uint32_t corr, uint64_t crc, const char *fn, uint64_t off) {
    for (size_t i = s->nrecs; i-- > 0;) {
        struct pc_record *r = &s->recs[i];
        /* Kernel-serialized: one launch's records are the last ones made, so
           the scan ends at another launch's (no cost that grows with the run). */
        if (r->range != s->range || (corr && r->correlation != corr))
            break;
        if (r->correlation == corr && r->crc == crc && r->offset == off && r->function == fn)
            return r;
    }
    s->recs = realloc(s->recs, (s->nrecs + 1) * sizeof *s->recs);
    struct pc_record *r = &s->recs[s->nrecs++];
    memset(r, 0, sizeof *r);
    r->correlation = corr, r->crc = crc, r->function = fn, r->offset = off, r->range = s->range;
    return r;
}

/* Set on the launching thread when its kernel-serialized kernel's range ended. */
static _Thread_local int tls_range_ended;

/* GPUSIM_PC_KERNEL_END_HOOK=SYMBOL (a test hook, not CUPTI behaviour): once a
 * kernel-serialized kernel's range has ended (its records are in the buffer
 * given at configuration) and the driver has let go of its locks, before the
 * launch's API-exit callbacks, the launching thread calls the program's
 * function SYMBOL (found with dlsym, so the program is linked -rdynamic): a
 * test can let another thread's kernel end in between, as one can on a GPU. */
void pcs_before_exit(void) {
    if (!tls_range_ended)
        return;
    tls_range_ended = 0;
    /* GPUSIM_PC_SERIALIZED_COST_US=N (simulated cost): a kernel-serialized
       sampled launch returns N us later, as one costs about 800 us more on
       an H200, so that a test can see what a budget of time does. */
    long cost = sim_fault_number("GPUSIM_PC_SERIALIZED_COST_US", 0);
    if (cost > 0)
        usleep((useconds_t)cost);
    static struct sim_hook hook = {.var = "GPUSIM_PC_KERNEL_END_HOOK"};
    sim_hook_fn h = sim_hook(&hook);
    if (h)
        h();
}

void pcs_kernel(const struct gpusim_op *op) {
    if (!atomic_load(&g_sampling))
        return;
    pthread_mutex_lock(&g_pcs_mu);
    struct pcs *s = find_id(op->context);
    if (!s || (s->start_stop && !s->started) || !op->name || s->wedged) {
        pthread_mutex_unlock(&g_pcs_mu);
        return;
    }
    int fresh = 0;
    struct loaded *m = module_of(op->context, op->name, &fresh);
    uint64_t n = kernel_samples(s, op);
    struct range_totals *tot = totals_of(s, s->range);
    tot->total += n;
    /* Test knob (simulated): the process's Nth sampled kernel fills the
       hardware buffer, whatever its size. */
    long full_at = sim_fault_number("GPUSIM_PC_HW_FULL_AT", 0);
    if (n * HW_BYTES_PER_SAMPLE > s->hw_buffer || ++g_kernels_sampled == (uint64_t)full_at) {
        s->hw_full = 1;
        s->wedged = 1;
        tot->dropped += n;
        if (s->mode == CUPTI_PC_SAMPLING_COLLECTION_MODE_KERNEL_SERIALIZED)
            range_end(s);
        pthread_mutex_unlock(&g_pcs_mu);
        return;
    }
    const struct pc_table *t = table_of(op->name);
    const struct pc_line *lines = t && t->n ? t->lines : &DEFAULT_LINE;
    size_t nl = t && t->n ? t->n : 1;
    uint64_t wsum = 0;
    for (size_t i = 0; i < nl; i++)
        wsum += lines[i].weight;
    if (!wsum) {
        pthread_mutex_unlock(&g_pcs_mu);
        return;
    }
    /* Largest remainder: floor shares, then one more to the entries with the
       largest remainders, earliest entry first on ties. */
    uint64_t share[nl], rem[nl], given = 0;
    for (size_t i = 0; i < nl; i++) {
        share[i] = n * lines[i].weight / wsum;
        rem[i] = n * lines[i].weight % wsum;
        given += share[i];
    }
    for (; given < n; given++) {
        size_t best = 0;
        for (size_t i = 1; i < nl; i++)
            if (rem[i] > rem[best])
                best = i;
        share[best]++;
        rem[best] = 0;
    }
    size_t before_launch = s->nrecs;
    uint32_t corr = s->mode == CUPTI_PC_SAMPLING_COLLECTION_MODE_KERNEL_SERIALIZED
                        ? (op->runtime_correlation_id ? op->runtime_correlation_id : op->correlation_id)
                        : 0;
    for (size_t i = 0; i < nl; i++) {
        if (!share[i])
            continue;
        struct pc_record *r = record_for(s, corr, m->crc, m->name, lines[i].offset);
        size_t before = reasons_in(s, r);
        int ni = not_issued_slot(lines[i].slot);
        uint32_t not_issued = ni < 0 ? 0 : (uint32_t)(share[i] * not_issued_percent() / 100);
        r->samples[lines[i].slot] += (uint32_t)share[i];
        if (not_issued)
            r->samples[ni] += not_issued;
        size_t after = reasons_in(s, r);
        if (after != before) {
            size_t grow = after && !before ? scratch_bytes(after) : scratch_bytes(after) - scratch_bytes(before);
            if (s->scratch_used + grow > s->scratch) {
                /* No room in the scratch buffer: the samples are dropped. */
                r->samples[lines[i].slot] -= (uint32_t)share[i];
                if (not_issued)
                    r->samples[ni] -= not_issued;
                tot->dropped += share[i];
                continue;
            }
            s->scratch_used += grow;
        }
    }
    /* A PC whose selected stall reasons have no samples gives no record; only
       a record made by this launch can be one (older ones had samples). */
    size_t kept = before_launch;
    for (size_t i = before_launch; i < s->nrecs; i++)
        if (reasons_in(s, &s->recs[i]))
            s->recs[kept++] = s->recs[i];
    s->nrecs = kept;
    /* Kernel-serialized: the kernel's end ends a range, and CUPTI writes the
       records into the buffer given at configuration, replacing what it held;
       what does not fit stays for cuptiPCSamplingGetData. As libcupti 13.0
       did on an H200, where a client that cleared that buffer and read only
       with cuptiPCSamplingGetData got no record at all. */
    if (s->mode == CUPTI_PC_SAMPLING_COLLECTION_MODE_KERNEL_SERIALIZED) {
        range_end(s);
        tls_range_ended = 1;
    }
    pthread_mutex_unlock(&g_pcs_mu);
}
