/* Tests of the simulated CUPTI's PC Sampling API (no GPU; it checks the simulation, not real CUPTI): a client of cupti_pcsampling.h in the program itself.
 *
 * usage: pc_sampling SCENARIO   (the Rust test sets GPUSIM_PC_SAMPLES and
 *                                GPUSIM_PC_SAMPLING_PRIVILEGE)
 *   reasons      the stall-reason table (refused before enable) and the default
 *                configuration
 *   serialized   kernel-serialized mode: each launch's PCs with its correlation id,
 *                stall reasons, and the source lines of the modules loaded
 *   serialized-buffer  kernel-serialized with the data buffer configured: each
 *                kernel's end replaces its content; GetData afterwards has none
 *   serialized-drain   the same, drained at each launch's return: every
 *                launch's records
 *   continuous   continuous mode: one record per PC, correlation id 0
 *   buffers      GetData in pieces (remainingNumPcs), a hardware buffer too small
 *   ranges       start/stop control and range ids
 *   privilege    cuptiPCSamplingEnable without the rights
 *   config       configuration attribute statuses
 *   app [ROUNDS] no CUPTI client of its own: the workload alone (ROUNDS times,
 *                default 1), for a recorder
 *   app-reset    the workload, 100 ms idle, then cudaDeviceReset (the context is
 *                destroyed while a recorder may be reading its samples)
 * Prints one result per line; the Rust test compares them. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <cupti_pcsampling.h>

#define CHECK(x)                                                                       \
    do {                                                                               \
        int r_ = (int)(x);                                                             \
        if (r_ != 0) {                                                                 \
            fprintf(stderr, "pc_sampling: %s = %d (line %d)\n", #x, r_, __LINE__);      \
            exit(3);                                                                   \
        }                                                                              \
    } while (0)

void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFunction(void **h, const char *hostFun, char *deviceFun, const char *deviceName,
                            int thread_limit, void *tid, void *bid, void *bDim, void *gDim, int *wSize);
static void hot_stub(void) {}
static void cold_stub(void) {}

static void launch(const void *stub, unsigned grid, unsigned block) {
    dim3 g = {grid, 1, 1}, b = {block, 1, 1};
    CHECK(cudaLaunchKernel(stub, g, b, NULL, 0, 0));
}

/* ------------------------------------------------------------------ the client */

#define MAX_LAUNCHES 16
static uint32_t g_launch_corr[MAX_LAUNCHES];
static int g_nlaunches;
#define MAX_MODULES 8
static struct {
    char *image;
    size_t size;
    uint64_t crc;
} g_modules[MAX_MODULES];
static int g_nmodules;

/* The buffer given at configuration, and whether each launch's return drains
   it (serialized-drain). */
static CUpti_PCSamplingData *g_config;
static int g_drain;
/* Prints the records and frees their function names. */
static void print_records(const CUpti_PCSamplingData *d);

static void CUPTIAPI on_callback(void *u, CUpti_CallbackDomain d, CUpti_CallbackId id, const void *data) {
    if (d == CUPTI_CB_DOMAIN_RUNTIME_API) {
        const CUpti_CallbackData *c = data;
        if (c->callbackSite == CUPTI_API_ENTER && g_nlaunches < MAX_LAUNCHES)
            g_launch_corr[g_nlaunches++] = c->correlationId;
        if (c->callbackSite == CUPTI_API_EXIT && g_drain && g_config) {
            printf("drained at launch %d's return: pcs %zu\n", g_nlaunches - 1, g_config->totalNumPcs);
            print_records(g_config);
            g_config->totalNumPcs = 0;
        }
    } else if (d == CUPTI_CB_DOMAIN_RESOURCE && id == CUPTI_CBID_RESOURCE_MODULE_LOADED) {
        const CUpti_ModuleResourceData *m = ((const CUpti_ResourceData *)data)->resourceDescriptor;
        if (g_nmodules < MAX_MODULES) {
            g_modules[g_nmodules].image = malloc(m->cubinSize);
            memcpy(g_modules[g_nmodules].image, m->pCubin, m->cubinSize);
            g_modules[g_nmodules].size = m->cubinSize;
            CUpti_GetCubinCrcParams p = {.size = CUpti_GetCubinCrcParamsSize, .cubinSize = m->cubinSize,
                                         .cubin = m->pCubin};
            CHECK(cuptiGetCubinCrc(&p));
            g_modules[g_nmodules++].crc = p.cubinCrc;
        }
    }
}

static CUcontext g_ctx;
static size_t g_nreasons;
static uint32_t *g_index;
static char **g_names;

static void subscribe(void) {
    CUpti_SubscriberHandle sub;
    CHECK(cuptiSubscribe(&sub, on_callback, NULL));
    CHECK(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API,
                              CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000));
    CHECK(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_LOADED));
    CHECK(cudaFree(0));
    CHECK(cuCtxGetCurrent(&g_ctx));
}

/* The stall-reason table: CUPTI gives it once sampling is enabled in the context. */
static CUptiResult read_reasons(void) {
    CUpti_PCSamplingGetNumStallReasonsParams n = {
        .size = CUpti_PCSamplingGetNumStallReasonsParamsSize, .ctx = g_ctx, .numStallReasons = &g_nreasons};
    CUptiResult r = cuptiPCSamplingGetNumStallReasons(&n);
    if (r != CUPTI_SUCCESS)
        return r;
    g_index = calloc(g_nreasons, sizeof *g_index);
    g_names = calloc(g_nreasons, sizeof *g_names);
    for (size_t i = 0; i < g_nreasons; i++)
        g_names[i] = calloc(1, CUPTI_STALL_REASON_STRING_SIZE);
    CUpti_PCSamplingGetStallReasonsParams rp = {.size = CUpti_PCSamplingGetStallReasonsParamsSize,
                                                .ctx = g_ctx,
                                                .numStallReasons = g_nreasons,
                                                .stallReasonIndex = g_index,
                                                .stallReasons = g_names};
    return cuptiPCSamplingGetStallReasons(&rp);
}

static const char *reason_name(uint32_t index) {
    for (size_t i = 0; i < g_nreasons; i++)
        if (g_index[i] == index)
            return g_names[i] + strlen("smsp__pcsamp_warps_issue_stalled_");
    return "?";
}

static int launch_of(uint32_t corr) {
    for (int i = 0; i < g_nlaunches; i++)
        if (g_launch_corr[i] == corr)
            return i;
    return -1;
}

static CUptiResult configure(CUpti_PCSamplingConfigurationInfo *attrs, size_t n) {
    CUpti_PCSamplingConfigurationInfoParams p = {.size = CUpti_PCSamplingConfigurationInfoParamsSize,
                                                 .ctx = g_ctx,
                                                 .numAttributes = n,
                                                 .pPCSamplingConfigurationInfo = attrs};
    return cuptiPCSamplingSetConfigurationAttribute(&p);
}

static CUptiResult enable(void) {
    CUpti_PCSamplingEnableParams p = {.size = CUpti_PCSamplingEnableParamsSize, .ctx = g_ctx};
    CUptiResult r = cuptiPCSamplingEnable(&p);
    if (r == CUPTI_SUCCESS && !g_index)
        CHECK(read_reasons());
    return r;
}

static void set_mode(int mode, uint32_t period) {
    CUpti_PCSamplingConfigurationInfo a[2];
    memset(a, 0, sizeof a);
    a[0].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE;
    a[0].attributeData.collectionModeData.collectionMode = (CUpti_PCSamplingCollectionMode)mode;
    a[1].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD;
    a[1].attributeData.samplingPeriodData.samplingPeriod = period;
    CHECK(configure(a, 2));
}

static CUpti_PCSamplingData *new_data(size_t pcs) {
    CUpti_PCSamplingData *d = calloc(1, sizeof *d);
    d->size = sizeof *d;
    d->collectNumPcs = pcs;
    d->pPcData = calloc(pcs, sizeof *d->pPcData);
    for (size_t i = 0; i < pcs; i++) {
        d->pPcData[i].size = sizeof d->pPcData[i];
        d->pPcData[i].stallReason = calloc(g_nreasons, sizeof *d->pPcData[i].stallReason);
    }
    return d;
}

static CUptiResult get_data(CUpti_PCSamplingData *d) {
    CUpti_PCSamplingGetDataParams p = {.size = CUpti_PCSamplingGetDataParamsSize, .ctx = g_ctx,
                                       .pcSamplingData = d};
    return cuptiPCSamplingGetData(&p);
}

/* One line per PC record: launch, function+offset, source line, stall reasons. */
static void print_records(const CUpti_PCSamplingData *d) {
    for (size_t i = 0; i < d->totalNumPcs; i++) {
        const CUpti_PCSamplingPCData *pc = &d->pPcData[i];
        int mod = -1;
        for (int m = 0; m < g_nmodules; m++)
            if (g_modules[m].crc == pc->cubinCrc)
                mod = m;
        char where[512] = "no module";
        if (mod >= 0) {
            CUpti_GetSassToSourceCorrelationParams s = {.size = CUpti_GetSassToSourceCorrelationParamsSize,
                                                        .cubin = g_modules[mod].image,
                                                        .cubinSize = g_modules[mod].size,
                                                        .functionName = pc->functionName,
                                                        .pcOffset = pc->pcOffset};
            CHECK(cuptiGetSassToSourceCorrelation(&s));
            if (s.lineNumber)
                snprintf(where, sizeof where, "%s/%s:%u", s.dirName, s.fileName, s.lineNumber);
            else
                snprintf(where, sizeof where, "no line info");
            free(s.fileName);
            free(s.dirName);
        }
        printf("launch %d %s+0x%llx %s", pc->correlationId ? launch_of(pc->correlationId) : -1, pc->functionName,
               (unsigned long long)pc->pcOffset, where);
        for (size_t k = 0; k < pc->stallReasonCount; k++)
            printf(" %s=%u", reason_name(pc->stallReason[k].pcSamplingStallReasonIndex),
                   pc->stallReason[k].samples);
        printf("\n");
        /* Not freed here: a function's records may share one name
           (cupti_pcsampling.h); this short program leaves them to its end. */
    }
}

static void workload(void) {
    launch((const void *)hot_stub, 2, 64);
    launch((const void *)cold_stub, 1, 32);
    launch((const void *)hot_stub, 2, 64);
    CHECK(cudaDeviceSynchronize());
}

/* app-threads: two threads' launches return together. The first kernel's
   range ends; before its launch returns (GPUSIM_PC_KERNEL_END_HOOK=
   pc_kernel_end_hook), the second thread launches, and the first waits (at
   most 2 s) for the second kernel to end too, which replaces the first's
   records in the configured buffer unless the client holds the second launch
   until the first has returned. */
static atomic_int g_hook_calls, g_first_ended, g_second_ended;

void pc_kernel_end_hook(void) {
    if (atomic_fetch_add(&g_hook_calls, 1) == 0) {
        atomic_store(&g_first_ended, 1);
        for (int i = 0; i < 200 && !atomic_load(&g_second_ended); i++)
            usleep(10 * 1000);
    } else {
        atomic_store(&g_second_ended, 1);
    }
}

static void *second_thread(void *arg) {
    (void)arg;
    while (!atomic_load(&g_first_ended))
        usleep(1000);
    /* The same kernel: its module is loaded, so no module load (where a
       client may read the configured buffer) comes between the two. */
    launch((const void *)hot_stub, 2, 64);
    return NULL;
}

static void app_threads(void) {
    pthread_t t;
    if (pthread_create(&t, NULL, second_thread, NULL)) {
        fprintf(stderr, "pc_sampling: pthread_create failed\n");
        exit(1);
    }
    launch((const void *)hot_stub, 2, 64);
    pthread_join(t, NULL);
    CHECK(cudaDeviceSynchronize());
    printf("threads: %d kernels ended\n", atomic_load(&g_hook_calls));
}

/* ------------------------------------------------------------------ scenarios */

static void reasons(void) {
    printf("before enable: %d\n", read_reasons());
    CHECK(enable());
    printf("stall reasons %zu\n", g_nreasons);
    for (size_t i = 0; i < g_nreasons; i++)
        if (strstr(g_names[i], "long_scoreboard") || strstr(g_names[i], "selected"))
            printf("reason %u %s\n", g_index[i], g_names[i]);
    CUpti_PCSamplingConfigurationInfo a[3];
    memset(a, 0, sizeof a);
    a[0].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE;
    a[1].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SCRATCH_BUFFER_SIZE;
    a[2].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_HARDWARE_BUFFER_SIZE;
    CUpti_PCSamplingConfigurationInfoParams p = {.size = CUpti_PCSamplingConfigurationInfoParamsSize,
                                                 .ctx = g_ctx,
                                                 .numAttributes = 3,
                                                 .pPCSamplingConfigurationInfo = a};
    CHECK(cuptiPCSamplingGetConfigurationAttribute(&p));
    printf("defaults mode %d scratch %zu hw %zu\n", a[0].attributeData.collectionModeData.collectionMode,
           a[1].attributeData.scratchBufferSizeData.scratchBufferSize,
           a[2].attributeData.hardwareBufferSizeData.hardwareBufferSize);
}

static void sampled(int mode) {
    CHECK(enable());
    set_mode(mode, 5);
    workload();
    CUpti_PCSamplingData *d = new_data(64);
    CHECK(get_data(d));
    printf("total samples %llu dropped %llu pcs %zu remaining %zu range %llu modules %d\n",
           (unsigned long long)d->totalSamples, (unsigned long long)d->droppedSamples, d->totalNumPcs,
           d->remainingNumPcs, (unsigned long long)d->rangeId, g_nmodules);
    print_records(d);
    CUpti_PCSamplingDisableParams dp = {.size = CUpti_PCSamplingDisableParamsSize, .ctx = g_ctx};
    CHECK(cuptiPCSamplingDisable(&dp));
    printf("after disable: %d\n", get_data(d));
}

/* Kernel-serialized with the data buffer configured: each kernel's end writes
   its records there, replacing what it held. Without draining it at each
   launch's return only the last kernel's are left; GetData has none. */
static void serialized_buffer(int drain) {
    CHECK(enable());
    set_mode(CUPTI_PC_SAMPLING_COLLECTION_MODE_KERNEL_SERIALIZED, 5);
    g_config = new_data(64);
    CUpti_PCSamplingConfigurationInfo a;
    memset(&a, 0, sizeof a);
    a.attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER;
    a.attributeData.samplingDataBufferData.samplingDataBuffer = g_config;
    CHECK(configure(&a, 1));
    g_drain = drain;
    workload();
    g_drain = 0;
    CUpti_PCSamplingData *d = new_data(64);
    CHECK(get_data(d));
    printf("get data after the workload: pcs %zu\n", d->totalNumPcs);
    printf("configured buffer after the workload: pcs %zu\n", g_config->totalNumPcs);
    print_records(g_config);
}

static void buffers(void) {
    CHECK(enable());
    set_mode(CUPTI_PC_SAMPLING_COLLECTION_MODE_KERNEL_SERIALIZED, 5);
    workload();
    CUpti_PCSamplingData *d = new_data(2);
    for (int i = 0; i < 4; i++) {
        CHECK(get_data(d));
        printf("get: pcs %zu remaining %zu\n", d->totalNumPcs, d->remainingNumPcs);
        if (!d->remainingNumPcs)
            break;
    }
    /* 244 samples of 32 bytes do not fit in 4 KiB. */
    CUpti_PCSamplingConfigurationInfo a;
    memset(&a, 0, sizeof a);
    a.attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_HARDWARE_BUFFER_SIZE;
    a.attributeData.hardwareBufferSizeData.hardwareBufferSize = 4096;
    CHECK(configure(&a, 1));
    launch((const void *)hot_stub, 2, 64);
    CHECK(cudaDeviceSynchronize());
    const char *name = "?";
    CUptiResult r = get_data(d);
    cuptiGetResultString(r, &name);
    printf("small hardware buffer: %s full %u pcs %zu dropped %llu\n", name, d->hardwareBufferFull,
           d->totalNumPcs, (unsigned long long)d->droppedSamples);
}

static void ranges(void) {
    CHECK(enable());
    set_mode(CUPTI_PC_SAMPLING_COLLECTION_MODE_KERNEL_SERIALIZED, 5);
    CUpti_PCSamplingStartParams sp = {.size = CUpti_PCSamplingStartParamsSize, .ctx = g_ctx};
    CUpti_PCSamplingStopParams tp = {.size = CUpti_PCSamplingStopParamsSize, .ctx = g_ctx};
    printf("start without control: %d\n", cuptiPCSamplingStart(&sp));
    CUpti_PCSamplingConfigurationInfo a;
    memset(&a, 0, sizeof a);
    a.attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_ENABLE_START_STOP_CONTROL;
    a.attributeData.enableStartStopControlData.enableStartStopControl = 1;
    CHECK(configure(&a, 1));
    launch((const void *)cold_stub, 1, 32); /* outside any range: not sampled */
    CHECK(cuptiPCSamplingStart(&sp));
    launch((const void *)hot_stub, 2, 64);
    CHECK(cuptiPCSamplingStop(&tp));
    CHECK(cuptiPCSamplingStart(&sp));
    launch((const void *)cold_stub, 1, 32);
    CHECK(cuptiPCSamplingStop(&tp));
    printf("stop twice: %d\n", cuptiPCSamplingStop(&tp));
    CHECK(cudaDeviceSynchronize());
    CUpti_PCSamplingData *d = new_data(64);
    for (int i = 0; i < 3; i++) {
        CHECK(get_data(d));
        printf("range %llu pcs %zu samples %llu\n", (unsigned long long)d->rangeId, d->totalNumPcs,
               (unsigned long long)d->totalSamples);
        print_records(d);
    }
}

static void privilege(void) {
    const char *name = "?";
    CUptiResult r = enable();
    cuptiGetResultString(r, &name);
    printf("enable: %s\n", name);
    CUpti_PCSamplingData *d = new_data(4);
    cuptiGetResultString(get_data(d), &name);
    printf("get data: %s\n", name);
    /* The program goes on. */
    launch((const void *)hot_stub, 1, 32);
    printf("launch after refusal: %d\n", cudaDeviceSynchronize());
}

static void config(void) {
    CUpti_PCSamplingConfigurationInfo a[4];
    memset(a, 0, sizeof a);
    a[0].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD;
    a[0].attributeData.samplingPeriodData.samplingPeriod = 4;
    printf("before enable: %d\n", configure(a, 1));
    CHECK(enable());
    printf("enable twice: %d\n", enable());
    uint32_t bad = 3; /* not an index of the table */
    a[1].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_STALL_REASON;
    a[1].attributeData.stallReasonData.stallReasonCount = 1;
    a[1].attributeData.stallReasonData.pStallReasonIndex = &bad;
    a[2].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_OUTPUT_DATA_FORMAT;
    a[2].attributeData.outputDataFormatData.outputDataFormat = CUPTI_PC_SAMPLING_OUTPUT_DATA_FORMAT_PARSED;
    a[3].attributeType = (CUpti_PCSamplingConfigurationAttributeType)42;
    CUptiResult r = configure(a, 4);
    printf("set: %d statuses %d %d %d %d\n", r, a[0].attributeStatus, a[1].attributeStatus, a[2].attributeStatus,
           a[3].attributeStatus);
    /* Only long_scoreboard: the other PCs give no record. */
    uint32_t only = 0;
    for (size_t i = 0; i < g_nreasons; i++)
        if (!strcmp(g_names[i], "smsp__pcsamp_warps_issue_stalled_long_scoreboard"))
            only = g_index[i];
    a[1].attributeData.stallReasonData.pStallReasonIndex = &only;
    a[0].attributeData.samplingPeriodData.samplingPeriod = 5;
    CHECK(configure(a, 2));
    workload();
    CUpti_PCSamplingData *d = new_data(64);
    CHECK(get_data(d));
    printf("selected only: total samples %llu pcs %zu\n", (unsigned long long)d->totalSamples, d->totalNumPcs);
    print_records(d);
}

int main(int argc, char **argv) {
    if (argc != 2 && !(argc == 3 && !strcmp(argv[1], "app"))) {
        fprintf(stderr, "usage: pc_sampling SCENARIO\n");
        return 2;
    }
    static int image;
    void **h = __cudaRegisterFatBinary(&image);
    __cudaRegisterFunction(h, (const char *)hot_stub, "_Z3hotPf", "hot", -1, 0, 0, 0, 0, 0);
    __cudaRegisterFunction(h, (const char *)cold_stub, "_Z4coldv", "cold", -1, 0, 0, 0, 0, 0);
    const char *s = argv[1];
    if (!strcmp(s, "app")) {
        long rounds = argc == 3 ? strtol(argv[2], NULL, 10) : 1;
        for (long i = 0; i < rounds; i++)
            workload();
        return 0;
    }
    if (!strcmp(s, "app-threads")) {
        app_threads();
        return 0;
    }
    if (!strcmp(s, "app-reset")) {
        workload();
        usleep(100 * 1000);
        CHECK(cudaDeviceReset());
        printf("reset\n");
        return 0;
    }
    subscribe();
    if (!strcmp(s, "reasons"))
        reasons();
    else if (!strcmp(s, "serialized"))
        sampled(CUPTI_PC_SAMPLING_COLLECTION_MODE_KERNEL_SERIALIZED);
    else if (!strcmp(s, "continuous"))
        sampled(CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS);
    else if (!strcmp(s, "serialized-buffer"))
        serialized_buffer(0);
    else if (!strcmp(s, "serialized-drain"))
        serialized_buffer(1);
    else if (!strcmp(s, "buffers"))
        buffers();
    else if (!strcmp(s, "ranges"))
        ranges();
    else if (!strcmp(s, "privilege"))
        privilege();
    else if (!strcmp(s, "config"))
        config();
    else {
        fprintf(stderr, "pc_sampling: unknown scenario %s\n", s);
        return 2;
    }
    return 0;
}
