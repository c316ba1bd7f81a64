/* Simulated CUDA driver, libcuda.so.1 (no GPU): the driver API for modules,
 * functions, launches and graphs. Kernels never run. What the driver does and
 * does not simulate: driver.c. */
#include "driver_internal.h"

/* Modules and functions ------------------------------------------------------------ */

/* The names after each `.entry` of a PTX text. */
static int ptx_entries(struct module *m, const char *ptx) {
    for (const char *p = ptx; (p = strstr(p, ".entry")) != NULL;) {
        p += 6;
        if (!isspace((unsigned char)*p))
            continue;
        while (isspace((unsigned char)*p))
            p++;
        const char *e = p;
        while (*e && (isalnum((unsigned char)*e) || *e == '_' || *e == '$' || *e == '.'))
            e++;
        if (e == p)
            continue;
        char name[512];
        size_t len = (size_t)(e - p) < sizeof name - 1 ? (size_t)(e - p) : sizeof name - 1;
        memcpy(name, p, len);
        name[len] = 0;
        struct kernel **ks = realloc(m->kernels, (size_t)(m->nkernels + 1) * sizeof *ks);
        if (!ks)
            return -1;
        m->kernels = ks;
        pthread_mutex_lock(&g_kernel_mu);
        struct kernel *k = new_kernel(name, NULL, m);
        pthread_mutex_unlock(&g_kernel_mu);
        if (!k)
            return -1;
        m->kernels[m->nkernels++] = k;
        p = e;
    }
    return 0;
}

/* A module (or library) from an image; `c` may be NULL for a library. */
static CUresult load_module_in(CUmodule *pm, const void *image, struct ctx *c) {
    if (!pm || !image)
        return CUDA_ERROR_INVALID_VALUE;
    struct module *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->magic = MAGIC_MODULE;
    m->ctx = c;
    const unsigned char *b = image;
    /* ELF cubins and fatbins are not parsed: any function name resolves. */
    if ((b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F') ||
        (b[0] == 0x50 && b[1] == 0xed && b[2] == 0x55 && b[3] == 0xba) ||
        (b[0] == 0x46 && b[1] == 0x24 && b[2] == 0x6b && b[3] == 0x46))
        m->any_name = 1;
    else if (ptx_entries(m, image)) {
        free(m->kernels);
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pm = (CUmodule)m;
    return CUDA_SUCCESS;
}

static CUresult load_module(CUmodule *pm, const void *image) {
    struct ctx *c = current_ctx();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    return load_module_in(pm, image, c);
}

CUresult load_module_any(CUmodule *pm, const void *image) {
    return load_module_in(pm, image, current_ctx());
}

DRV(cuModuleLoadData, (CUmodule *pm, const void *image), (pm, image)) {
    ENTER(cuModuleLoadData, pm, image);
    RETURN(load_module(pm, image));
}

DRV(cuModuleLoadDataEx, (CUmodule *pm, const void *image, unsigned int n, CUjit_option *o, void **v),
    (pm, image, n, o, v)) {
    ENTER(cuModuleLoadDataEx, pm, image, n, o, v);
    RETURN(load_module(pm, image));
}

DRV(cuModuleLoad, (CUmodule *pm, const char *path), (pm, path)) {
    ENTER(cuModuleLoad, pm, path);
    if (!path)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    FILE *f = fopen(path, "rb");
    if (!f)
        RETURN(CUDA_ERROR_FILE_NOT_FOUND);
    char *text = NULL;
    size_t len = 0, cap = 0, r;
    char chunk[65536];
    while ((r = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (len + r + 1 > cap) {
            cap = (len + r + 1) * 2;
            char *t = realloc(text, cap);
            if (!t)
                break;
            text = t;
        }
        memcpy(text + len, chunk, r);
        len += r;
    }
    fclose(f);
    if (!text)
        RETURN(CUDA_ERROR_INVALID_IMAGE);
    text[len] = 0;
    CUresult r2 = load_module(pm, text);
    free(text);
    RETURN(r2);
}

DRV(cuModuleUnload, (CUmodule h), (h)) {
    ENTER(cuModuleUnload, h);
    struct module *m = (struct module *)h;
    if (!m || m->magic != MAGIC_MODULE)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    /* Kernels stay: records delivered later still point to their names. */
    m->magic = 0;
    RETURN(CUDA_SUCCESS);
}

CUresult module_function(CUfunction *pf, CUmodule h, const char *name) {
    struct module *m = (struct module *)h;
    if (!pf || !name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!m || m->magic != MAGIC_MODULE)
        return CUDA_ERROR_INVALID_HANDLE;
    for (int i = 0; i < m->nkernels; i++)
        if (strcmp(m->kernels[i]->name, name) == 0) {
            *pf = (CUfunction)m->kernels[i];
            return CUDA_SUCCESS;
        }
    if (!m->any_name)
        return CUDA_ERROR_NOT_FOUND;
    struct kernel **ks = realloc(m->kernels, (size_t)(m->nkernels + 1) * sizeof *ks);
    if (!ks)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->kernels = ks;
    pthread_mutex_lock(&g_kernel_mu);
    struct kernel *k = new_kernel(name, NULL, m);
    pthread_mutex_unlock(&g_kernel_mu);
    if (!k)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->kernels[m->nkernels++] = k;
    *pf = (CUfunction)k;
    return CUDA_SUCCESS;
}

DRV(cuModuleGetFunction, (CUfunction *pf, CUmodule h, const char *name), (pf, h, name)) {
    ENTER(cuModuleGetFunction, pf, h, name);
    RETURN(module_function(pf, h, name));
}

DRV(cuModuleGetGlobal, (CUdeviceptr *dp, size_t *bytes, CUmodule h, const char *name), (dp, bytes, h, name)) {
    ENTER(cuModuleGetGlobal, dp, bytes, h, name);
    RETURN(CUDA_ERROR_NOT_FOUND);
}

DRV(cuFuncGetAttribute, (int *v, CUfunction_attribute a, CUfunction f), (v, a, f)) {
    ENTER(cuFuncGetAttribute, v, a, f);
    if (!v)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!as_kernel(f))
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *v = 90; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *v = 90; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *v = as_kernel(f)->max_dynamic_shared; break;
    default: *v = 0; break;
    }
    RETURN(CUDA_SUCCESS);
}

DRV(cuFuncSetAttribute, (CUfunction f, CUfunction_attribute a, int v), (f, a, v)) {
    ENTER(cuFuncSetAttribute, f, a, v);
    struct kernel *k = as_kernel(f);
    if (!k)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
        k->max_dynamic_shared = v;
    RETURN(CUDA_SUCCESS);
}

DRV(cuFuncSetCacheConfig, (CUfunction f, CUfunc_cache c), (f, c)) {
    ENTER(cuFuncSetCacheConfig, f, c);
    RETURN(as_kernel(f) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

DRV(cuFuncGetName, (const char **name, CUfunction f), (name, f)) {
    ENTER(cuFuncGetName, name, f);
    struct kernel *k = as_kernel(f);
    if (!name)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!k)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    *name = k->name;
    RETURN(CUDA_SUCCESS);
}

/* Launches -------------------------------------------------------------------------- */

DRV(cuLaunchKernel,
    (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
     unsigned int by, unsigned int bz, unsigned int shared, CUstream s, void **params, void **extra),
    (f, gx, gy, gz, bx, by, bz, shared, s, params, extra)) {
    ENTER_SYM(cuLaunchKernel, gpusim_function_name(f), f, gx, gy, gz, bx, by, bz, shared, s,
              params, extra);
    uint32_t grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    RETURN(launch(f, grid, block, shared, s, CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR, &call_));
}

DRV(cuLaunchCooperativeKernel,
    (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
     unsigned int by, unsigned int bz, unsigned int shared, CUstream s, void **params),
    (f, gx, gy, gz, bx, by, bz, shared, s, params)) {
    ENTER_SYM(cuLaunchCooperativeKernel, gpusim_function_name(f), f, gx, gy, gz, bx, by, bz,
              shared, s, params);
    uint32_t grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    RETURN(launch(f, grid, block, shared, s, CUPTI_ACTIVITY_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE,
                  &call_));
}

DRV(cuLaunchKernelEx, (const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra),
    (cfg, f, params, extra)) {
    ENTER_SYM(cuLaunchKernelEx, gpusim_function_name(f), cfg, f, params, extra);
    if (!cfg)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    uint8_t type = CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR;
    for (unsigned i = 0; i < cfg->numAttrs; i++)
        if (cfg->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && cfg->attrs[i].value.cooperative)
            type = CUPTI_ACTIVITY_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE;
    uint32_t grid[3] = {cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ};
    uint32_t block[3] = {cfg->blockDimX, cfg->blockDimY, cfg->blockDimZ};
    RETURN(launch(f, grid, block, cfg->sharedMemBytes, cfg->hStream, type, &call_));
}

/* Graphs ---------------------------------------------------------------------------- */

static struct graph *new_graph(void) {
    struct graph *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->magic = MAGIC_GRAPH;
    g->id = atomic_fetch_add(&g_next_graph, 1);
    return g;
}

DRV(cuGraphCreate, (CUgraph *pg, unsigned int flags), (pg, flags)) {
    ENTER(cuGraphCreate, pg, flags);
    if (!pg || flags)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    struct graph *g = new_graph();
    if (!g)
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    *pg = (CUgraph)g;
    RETURN(CUDA_SUCCESS);
}

/* A user-built kernel node. Dependencies must be nodes of the same graph; since a
 * node can only depend on nodes made before it, running the nodes in the order
 * they were added (as every launch here does) honours them. The node is
 * reported made (GRAPHNODE_CREATED) from inside this call, as CUPTI does. */
DRV(cuGraphAddKernelNode, (CUgraphNode *pn, CUgraph hg, const CUgraphNode *deps, size_t ndeps,
                           const CUDA_KERNEL_NODE_PARAMS *p),
    (pn, hg, deps, ndeps, p)) {
    ENTER_SYM(cuGraphAddKernelNode, p ? gpusim_function_name(p->func) : NULL, pn, hg, deps, ndeps,
              p);
    struct graph *g = (struct graph *)hg;
    if (!pn || !p || (ndeps && !deps))
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!g || g->magic != MAGIC_GRAPH)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (!current_ctx())
        RETURN(CUDA_ERROR_INVALID_CONTEXT);
    for (size_t i = 0; i < ndeps; i++) {
        int found = 0;
        for (size_t j = 0; j < g->n && !found; j++)
            found = (CUgraphNode)g->nodes[j] == deps[i];
        if (!found)
            RETURN(CUDA_ERROR_INVALID_VALUE);
    }
    /* A NULL func with a CUkernel: the simulated driver's CUkernel and CUfunction
     * are the same handle. */
    CUfunction f = p->func ? p->func : (CUfunction)p->kern;
    uint32_t grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
    uint32_t block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
    struct node n;
    CUresult r =
        kernel_node(f, grid, block, p->sharedMemBytes, CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR, &n);
    if (r != CUDA_SUCCESS)
        RETURN(r);
    struct node *made = graph_add(g, &n);
    if (!made)
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    report_graph_node(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, g, made, NULL, NULL, NULL);
    *pn = (CUgraphNode)made;
    RETURN(CUDA_SUCCESS);
}

static _Atomic uint64_t g_next_capture = 1;
static __thread CUstreamCaptureMode tls_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

static CUresult begin_capture(struct stream *s, struct graph *into) {
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (s->legacy)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (s->capture)
        return CUDA_ERROR_ILLEGAL_STATE;
    struct graph *g = into ? into : new_graph();
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    g->capture_id = atomic_fetch_add(&g_next_capture, 1);
    s->capture = g;
    s->capture_origin = 1;
    return CUDA_SUCCESS;
}

/* User-built nodes other than kernels: checks the dependencies as for kernel
 * nodes, appends a copy of `n` and reports it made. */
static CUresult add_node(CUgraphNode *pn, CUgraph hg, const CUgraphNode *deps, size_t ndeps,
                         const struct node *n) {
    struct graph *g = (struct graph *)hg;
    if (!pn || (ndeps && !deps))
        return CUDA_ERROR_INVALID_VALUE;
    if (!g || g->magic != MAGIC_GRAPH)
        return CUDA_ERROR_INVALID_HANDLE;
    for (size_t i = 0; i < ndeps; i++) {
        int found = 0;
        for (size_t j = 0; j < g->n && !found; j++)
            found = (CUgraphNode)g->nodes[j] == deps[i];
        if (!found)
            return CUDA_ERROR_INVALID_VALUE;
    }
    struct node *made = graph_add(g, n);
    if (!made)
        return CUDA_ERROR_OUT_OF_MEMORY;
    report_graph_node(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, g, made, NULL, NULL, NULL);
    *pn = (CUgraphNode)made;
    return CUDA_SUCCESS;
}

DRV(cuGraphAddHostNode, (CUgraphNode *pn, CUgraph hg, const CUgraphNode *deps, size_t ndeps, const CUDA_HOST_NODE_PARAMS *p),
    (pn, hg, deps, ndeps, p)) {
    ENTER(cuGraphAddHostNode, pn, hg, deps, ndeps, p);
    if (!p || !p->fn)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    struct node n = {.kind = NODE_HOST, .host_fn = p->fn, .host_data = p->userData};
    RETURN(add_node(pn, hg, deps, ndeps, &n));
}

/* A copy node; only copies whose bytes are contiguous at both ends (the 1D
 * form, or rows whose pitch is their width). */
DRV(cuGraphAddMemcpyNode, (CUgraphNode *pn, CUgraph hg, const CUgraphNode *deps, size_t ndeps, const CUDA_MEMCPY3D *p, CUcontext c),
    (pn, hg, deps, ndeps, p, c)) {
    ENTER(cuGraphAddMemcpyNode, pn, hg, deps, ndeps, p, c);
    if (!p)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY)
        RETURN(CUDA_ERROR_NOT_SUPPORTED);
    size_t h = p->Height ? p->Height : 1, d = p->Depth ? p->Depth : 1;
    int rows = h * d > 1;
    if (rows && ((p->srcPitch && p->srcPitch != p->WidthInBytes) || (p->dstPitch && p->dstPitch != p->WidthInBytes)))
        RETURN(CUDA_ERROR_NOT_SUPPORTED);
    const char *src = p->srcMemoryType == CU_MEMORYTYPE_HOST ? p->srcHost : (const char *)p->srcDevice;
    char *dst = p->dstMemoryType == CU_MEMORYTYPE_HOST ? p->dstHost : (char *)p->dstDevice;
    size_t sp = p->srcPitch ? p->srcPitch : p->WidthInBytes, dp = p->dstPitch ? p->dstPitch : p->WidthInBytes;
    src += p->srcXInBytes + (p->srcY + p->srcZ * (p->srcHeight ? p->srcHeight : h)) * sp;
    dst += p->dstXInBytes + (p->dstY + p->dstZ * (p->dstHeight ? p->dstHeight : h)) * dp;
    uint32_t sd = 0, dd = 0;
    uint8_t sk = mem_kind(src, &sd), dk = mem_kind(dst, &dd);
    struct node n = {.kind = NODE_COPY, .dst = dst, .src = src, .bytes = p->WidthInBytes * h * d,
                     .src_kind = sk, .dst_kind = dk};
    int sdev = is_device_kind(sk), ddev = is_device_kind(dk);
    n.copy_kind = sdev && ddev ? (sd != dd ? CUPTI_ACTIVITY_MEMCPY_KIND_PTOP : CUPTI_ACTIVITY_MEMCPY_KIND_DTOD)
                  : sdev       ? CUPTI_ACTIVITY_MEMCPY_KIND_DTOH
                  : ddev       ? CUPTI_ACTIVITY_MEMCPY_KIND_HTOD
                               : CUPTI_ACTIVITY_MEMCPY_KIND_HTOH;
    RETURN(add_node(pn, hg, deps, ndeps, &n));
}

DRV(cuGraphAddMemsetNode, (CUgraphNode *pn, CUgraph hg, const CUgraphNode *deps, size_t ndeps, const CUDA_MEMSET_NODE_PARAMS *p, CUcontext c),
    (pn, hg, deps, ndeps, p, c)) {
    ENTER(cuGraphAddMemsetNode, pn, hg, deps, ndeps, p, c);
    if (!p || !p->dst || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4))
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (p->height > 1 && p->pitch != p->width * p->elementSize)
        RETURN(CUDA_ERROR_NOT_SUPPORTED);
    struct node n = {.kind = NODE_MEMSET, .dst = (void *)p->dst,
                     .bytes = p->width * p->elementSize * (p->height ? p->height : 1),
                     .value = p->value, .elem = p->elementSize};
    RETURN(add_node(pn, hg, deps, ndeps, &n));
}

/* An allocation node: the memory is allocated when the node is made, and lives
 * until the process ends (the simulation does not reuse graph memory). */
DRV(cuGraphAddMemAllocNode, (CUgraphNode *pn, CUgraph hg, const CUgraphNode *deps, size_t ndeps, CUDA_MEM_ALLOC_NODE_PARAMS *p),
    (pn, hg, deps, ndeps, p)) {
    ENTER(cuGraphAddMemAllocNode, pn, hg, deps, ndeps, p);
    if (!p || !p->bytesize || p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        BAD_DEVICE(p->poolProps.location.id))
        RETURN(CUDA_ERROR_INVALID_VALUE);
    struct ctx *saved = tls_ctx;
    struct device *dev = &g_dev[p->poolProps.location.id];
    tls_ctx = dev->primary.live ? &dev->primary : tls_ctx;
    CUdeviceptr m = 0;
    CUresult r = device_alloc(&m, p->bytesize, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE);
    tls_ctx = saved;
    if (r != CUDA_SUCCESS)
        RETURN(r);
    struct node n = {.kind = NODE_MEM_ALLOC, .dst = (void *)m, .bytes = p->bytesize};
    r = add_node(pn, hg, deps, ndeps, &n);
    if (r != CUDA_SUCCESS) {
        device_free(m);
        RETURN(r);
    }
    p->dptr = m;
    RETURN(CUDA_SUCCESS);
}

DRV(cuGraphAddMemFreeNode, (CUgraphNode *pn, CUgraph hg, const CUgraphNode *deps, size_t ndeps, CUdeviceptr dptr),
    (pn, hg, deps, ndeps, dptr)) {
    ENTER(cuGraphAddMemFreeNode, pn, hg, deps, ndeps, dptr);
    struct alloc a;
    if (!dptr || !mem_find((const void *)dptr, &a) || !is_device_kind(a.kind))
        RETURN(CUDA_ERROR_INVALID_VALUE);
    struct node n = {.kind = NODE_MEM_FREE, .dst = (void *)dptr};
    RETURN(add_node(pn, hg, deps, ndeps, &n));
}

/* A copy of a graph: its nodes copied in order (the dependencies are the order). */
DRV(cuGraphClone, (CUgraph *pg, CUgraph hg), (pg, hg)) {
    ENTER(cuGraphClone, pg, hg);
    struct graph *g = (struct graph *)hg;
    if (!pg)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!g || g->magic != MAGIC_GRAPH)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    struct graph *c = new_graph();
    if (!c)
        RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    for (size_t i = 0; i < g->n; i++) {
        struct node *made = graph_add(c, g->nodes[i]);
        if (!made) {
            graph_free_nodes(c);
            free(c);
            RETURN(CUDA_ERROR_OUT_OF_MEMORY);
        }
        report_graph_node(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, c, made, NULL, NULL, NULL);
    }
    *pg = (CUgraph)c;
    RETURN(CUDA_SUCCESS);
}

DRV(cuStreamBeginCapture, (CUstream hs, CUstreamCaptureMode mode), (hs, mode)) {
    ENTER(cuStreamBeginCapture, hs, mode);
    RETURN(begin_capture(resolve_stream(hs), NULL));
}

DRV(cuStreamBeginCaptureToGraph,
    (CUstream hs, CUgraph hg, const CUgraphNode *deps, const CUgraphEdgeData *edges, size_t ndeps,
     CUstreamCaptureMode mode),
    (hs, hg, deps, edges, ndeps, mode)) {
    ENTER(cuStreamBeginCaptureToGraph, hs, hg, deps, edges, ndeps, mode);
    struct graph *g = (struct graph *)hg;
    if (!g || g->magic != MAGIC_GRAPH)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    RETURN(begin_capture(resolve_stream(hs), g));
}

/* Ends the capture that `s` began: every stream that joined it leaves it. */
DRV(cuStreamEndCapture, (CUstream hs, CUgraph *pg), (hs, pg)) {
    ENTER(cuStreamEndCapture, hs, pg);
    struct stream *s = resolve_stream(hs);
    if (!s || !pg)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!s->capture)
        RETURN(CUDA_ERROR_ILLEGAL_STATE);
    if (!s->capture_origin)
        RETURN(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
    struct graph *g = s->capture;
    struct device *d = s->ctx->dev;
    pthread_mutex_lock(&d->mu);
    for (struct stream *x = d->streams; x; x = x->next)
        if (x->capture == g)
            x->capture = NULL;
    pthread_mutex_unlock(&d->mu);
    s->capture = NULL;
    g->capture_id = 0;
    *pg = (CUgraph)g;
    RETURN(CUDA_SUCCESS);
}

DRV(cuStreamIsCapturing, (CUstream hs, CUstreamCaptureStatus *st), (hs, st)) {
    ENTER(cuStreamIsCapturing, hs, st);
    struct stream *s = resolve_stream(hs);
    if (!s || !st)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    *st = s->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    RETURN(CUDA_SUCCESS);
}

/* The capture's dependencies are the last captured node: the simulation keeps a
 * capture as one chain in node order. */
DRV(cuStreamGetCaptureInfo,
    (CUstream hs, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *graph,
     const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps),
    (hs, st, id, graph, deps, edges, ndeps)) {
    ENTER(cuStreamGetCaptureInfo, hs, st, id, graph, deps, edges, ndeps);
    struct stream *s = resolve_stream(hs);
    if (!s)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (!st)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    struct graph *g = s->capture;
    *st = g ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    if (id)
        *id = g ? g->capture_id : 0;
    if (graph)
        *graph = (CUgraph)g;
    if (deps)
        *deps = g && g->n ? (const CUgraphNode *)&g->nodes[g->n - 1] : NULL;
    if (edges)
        *edges = NULL;
    if (ndeps)
        *ndeps = g && g->n ? 1 : 0;
    RETURN(CUDA_SUCCESS);
}

DRV(cuStreamUpdateCaptureDependencies,
    (CUstream hs, CUgraphNode *deps, const CUgraphEdgeData *edges, size_t ndeps, unsigned int flags),
    (hs, deps, edges, ndeps, flags)) {
    ENTER(cuStreamUpdateCaptureDependencies, hs, deps, edges, ndeps, flags);
    struct stream *s = resolve_stream(hs);
    if (!s)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    RETURN(s->capture ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_STATE);
}

DRV(cuThreadExchangeStreamCaptureMode, (CUstreamCaptureMode *mode), (mode)) {
    ENTER(cuThreadExchangeStreamCaptureMode, mode);
    if (!mode)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    CUstreamCaptureMode old = tls_capture_mode;
    tls_capture_mode = *mode;
    *mode = old;
    RETURN(CUDA_SUCCESS);
}

DRV(cuGraphGetNodes, (CUgraph hg, CUgraphNode *nodes, size_t *n), (hg, nodes, n)) {
    ENTER(cuGraphGetNodes, hg, nodes, n);
    struct graph *g = (struct graph *)hg;
    if (!g || g->magic != MAGIC_GRAPH)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!n)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    if (nodes) {
        size_t k = *n < g->n ? *n : g->n;
        for (size_t i = 0; i < k; i++)
            nodes[i] = (CUgraphNode)g->nodes[i];
        for (size_t i = k; i < *n; i++)
            nodes[i] = NULL;
        *n = k;
    } else {
        *n = g->n;
    }
    RETURN(CUDA_SUCCESS);
}

/* A node depends on the node before it: the simulation keeps one chain. */
DRV(cuGraphNodeGetDependencies, (CUgraphNode hn, CUgraphNode *deps, CUgraphEdgeData *edges, size_t *n),
    (hn, deps, edges, n)) {
    ENTER(cuGraphNodeGetDependencies, hn, deps, edges, n);
    struct node *node = (struct node *)hn;
    size_t i = 0;
    struct graph *g = node && node->magic == MAGIC_NODE ? node_graph(node, &i) : NULL;
    if (!g || !n)
        RETURN(CUDA_ERROR_INVALID_VALUE);
    size_t have = i > 0 ? 1 : 0;
    if (deps) {
        if (*n >= 1 && have) {
            deps[0] = (CUgraphNode)g->nodes[i - 1];
            if (edges)
                memset(&edges[0], 0, sizeof edges[0]);
        }
        *n = *n < have ? *n : have;
    } else {
        *n = have;
    }
    RETURN(CUDA_SUCCESS);
}

/* Copies every node of `hg` into a new instantiated graph: for each, the copy is
 * reported made (GRAPHNODE_CREATED), then copied from its original
 * (GRAPHNODE_CLONED), as CUPTI reports instantiation. */
static CUresult instantiate(CUgraphExec *pe, CUgraph hg) {
    struct graph *g = (struct graph *)hg;
    if (!pe)
        return CUDA_ERROR_INVALID_VALUE;
    if (!g || g->magic != MAGIC_GRAPH)
        return CUDA_ERROR_INVALID_HANDLE;
    struct graph_exec *x = calloc(1, sizeof *x);
    if (!x)
        return CUDA_ERROR_OUT_OF_MEMORY;
    x->magic = MAGIC_EXEC;
    x->id = atomic_fetch_add(&g_next_graph, 1);
    x->graph.magic = MAGIC_GRAPH;
    x->graph.id = x->id;
    for (size_t i = 0; i < g->n; i++) {
        struct node *copy = graph_add(&x->graph, g->nodes[i]);
        if (!copy) {
            graph_free_nodes(&x->graph);
            free(x);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        report_graph_node(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, &x->graph, copy, NULL, NULL, NULL);
        report_graph_node(CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED, &x->graph, copy, g, g->nodes[i], x);
    }
    *pe = (CUgraphExec)x;
    return CUDA_SUCCESS;
}

DRV(cuGraphInstantiateWithFlags, (CUgraphExec *pe, CUgraph g, unsigned long long flags), (pe, g, flags)) {
    ENTER(cuGraphInstantiateWithFlags, pe, g, flags);
    RETURN(instantiate(pe, g));
}

/* The nodes run in the order they were captured or added, on the launch stream, each charged to the
 * graph launch's correlation id. */
DRV(cuGraphLaunch, (CUgraphExec he, CUstream hs), (he, hs)) {
    ENTER(cuGraphLaunch, he, hs);
    struct graph_exec *x = (struct graph_exec *)he;
    if (!x || x->magic != MAGIC_EXEC)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    struct stream *s = resolve_stream(hs);
    if (!s)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    for (size_t i = 0; i < x->graph.n; i++) {
        const struct node *n = x->graph.nodes[i];
        if (n->kind == NODE_KERNEL)
            run_kernel(s, n, &call_, x->id, n->id);
        else if (n->kind == NODE_COPY)
            run_copy(s, n, &call_, x->id, n->id, 1);
        else if (n->kind == NODE_HOST)
            run_host(s, n);
        else if (n->kind == NODE_MEMSET)
            run_memset(s, n, &call_, x->id, n->id, 1);
        /* Memory nodes are no work: the memory lives from the node's making. */
    }
    RETURN(CUDA_SUCCESS);
}

DRV(cuGraphUpload, (CUgraphExec he, CUstream hs), (he, hs)) {
    ENTER(cuGraphUpload, he, hs);
    struct graph_exec *x = (struct graph_exec *)he;
    RETURN(x && x->magic == MAGIC_EXEC ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

/* CUPTI's header: GRAPHNODE_DESTROY_STARTING, "CUDA graph node is about to be
 * destroyed". Simulated: destroying a graph or an instantiated graph reports it
 * for each of its nodes, on the calling thread, from inside the call, before
 * the nodes are freed (their ids still readable). */
static void report_nodes_destroyed(struct graph *g, struct graph_exec *x) {
    for (size_t i = 0; i < g->n; i++)
        report_graph_node(CUPTI_CBID_RESOURCE_GRAPHNODE_DESTROY_STARTING, g, g->nodes[i], NULL, NULL, x);
}

DRV(cuGraphExecDestroy, (CUgraphExec he), (he)) {
    ENTER(cuGraphExecDestroy, he);
    struct graph_exec *x = (struct graph_exec *)he;
    if (!x || x->magic != MAGIC_EXEC)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    report_nodes_destroyed(&x->graph, x);
    x->magic = 0;
    x->graph.magic = 0;
    graph_free_nodes(&x->graph);
    free(x);
    RETURN(CUDA_SUCCESS);
}

DRV(cuGraphDestroy, (CUgraph hg), (hg)) {
    ENTER(cuGraphDestroy, hg);
    struct graph *g = (struct graph *)hg;
    if (!g || g->magic != MAGIC_GRAPH)
        RETURN(CUDA_ERROR_INVALID_HANDLE);
    report_nodes_destroyed(g, NULL);
    graph_release_objects(g);
    g->magic = 0;
    graph_free_nodes(g);
    free(g);
    RETURN(CUDA_SUCCESS);
}

