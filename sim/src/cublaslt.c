/* Simulated cuBLASLt, libcublasLt.so.13 (no GPU): each cublasLtMatmul launches one simulated kernel; nothing is computed.
 *
 * What it does: handles; matmul, matrix layout and preference descriptors, made
 * by the library or initialized in the caller's storage, with their attributes
 * stored and read back; heuristics (one algorithm, no workspace); and
 * cublasLtMatmul, which launches one kernel through the simulated runtime on
 * the given stream, named `simulated_cublasLt_matmul_<A type>_<ops>` plus the
 * epilogue (`_bias`, `_relu`, `_gelu`, ...), costed from its FLOPs and bytes
 * (the cost model of sim/README.md).
 *
 * What it does not do: compute anything, check that layouts fit the
 * operation beyond their sizes, matrix transforms; every other function of
 * cublasLt.h returns CUBLAS_STATUS_NOT_SUPPORTED. It prints nothing. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

#include "gpusim.h"
#include "simblas.h"

#define MAGIC_LT 0x63626c74u

struct cublasLtContext {
    uint32_t magic;
};

GPUSIM_EXPORT cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle) {
    if (!handle)
        return CUBLAS_STATUS_INVALID_VALUE;
    struct cublasLtContext *c = calloc(1, sizeof *c);
    if (!c)
        return CUBLAS_STATUS_ALLOC_FAILED;
    c->magic = MAGIC_LT;
    *handle = c;
    return CUBLAS_STATUS_SUCCESS;
}

/* A cuBLAS handle is a cuBLASLt handle too, as NVIDIA documents (PyTorch casts
 * one to the other): both start with their magic number. */
#define MAGIC_CUBLAS 0x63626c73u

static int lt_ok(cublasLtHandle_t h) { return h && (h->magic == MAGIC_LT || h->magic == MAGIC_CUBLAS); }

GPUSIM_EXPORT cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
    if (!handle || handle->magic != MAGIC_LT)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->magic = 0;
    free(handle);
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT const char *cublasLtGetStatusName(cublasStatus_t status) { return simblas_status_name(status); }

GPUSIM_EXPORT const char *cublasLtGetStatusString(cublasStatus_t status) {
    return simblas_status_string(status);
}

GPUSIM_EXPORT size_t cublasLtGetVersion(void) { return CUBLAS_VERSION; }

GPUSIM_EXPORT size_t cublasLtGetCudartVersion(void) { return 13000; }

GPUSIM_EXPORT cublasStatus_t cublasLtGetProperty(libraryPropertyType type, int *value) {
    if (!value)
        return CUBLAS_STATUS_INVALID_VALUE;
    switch (type) {
    case MAJOR_VERSION: *value = CUBLAS_VER_MAJOR; break;
    case MINOR_VERSION: *value = CUBLAS_VER_MINOR; break;
    case PATCH_LEVEL: *value = CUBLAS_VER_PATCH; break;
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasLtLoggerSetCallback(cublasLtLoggerCallback_t callback) {
    return CUBLAS_STATUS_SUCCESS;
}
GPUSIM_EXPORT cublasStatus_t cublasLtLoggerSetFile(FILE *file) { return CUBLAS_STATUS_SUCCESS; }
GPUSIM_EXPORT cublasStatus_t cublasLtLoggerOpenFile(const char *logFile) { return CUBLAS_STATUS_SUCCESS; }
GPUSIM_EXPORT cublasStatus_t cublasLtLoggerSetLevel(int level) { return CUBLAS_STATUS_SUCCESS; }
GPUSIM_EXPORT cublasStatus_t cublasLtLoggerSetMask(int mask) { return CUBLAS_STATUS_SUCCESS; }
GPUSIM_EXPORT cublasStatus_t cublasLtLoggerForceDisable(void) { return CUBLAS_STATUS_SUCCESS; }

/* ------------------------------------------------------------------ descriptors
 * Every descriptor keeps its attributes as (id, value) pairs of up to 8 bytes in
 * the opaque storage the header sizes, so that descriptors initialized in the
 * caller's memory (the *Init_internal forms) work the same as created ones. */

struct attrs {
    uint32_t n;
    uint32_t id[15];
    uint64_t value[15];
};

static cublasStatus_t attr_set(struct attrs *a, uint32_t id, const void *buf, size_t size) {
    if (!buf || size == 0 || size > 8)
        return CUBLAS_STATUS_INVALID_VALUE;
    uint64_t v = 0;
    memcpy(&v, buf, size);
    for (uint32_t i = 0; i < a->n; i++)
        if (a->id[i] == id) {
            a->value[i] = v;
            return CUBLAS_STATUS_SUCCESS;
        }
    if (a->n == 15)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    a->id[a->n] = id;
    a->value[a->n++] = v;
    return CUBLAS_STATUS_SUCCESS;
}

static uint64_t attr_value(const struct attrs *a, uint32_t id, uint64_t otherwise) {
    for (uint32_t i = 0; i < a->n; i++)
        if (a->id[i] == id)
            return a->value[i];
    return otherwise;
}

static cublasStatus_t attr_get(const struct attrs *a, uint32_t id, void *buf, size_t size, size_t *written,
                               size_t natural) {
    if (!buf && !written)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (written)
        *written = natural;
    if (!buf || size == 0)
        return written ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    if (size < natural || natural > 8)
        return CUBLAS_STATUS_INVALID_VALUE;
    uint64_t v = attr_value(a, id, 0);
    memcpy(buf, &v, natural);
    return CUBLAS_STATUS_SUCCESS;
}

_Static_assert(sizeof(struct attrs) <= sizeof(cublasLtMatmulDescOpaque_t), "matmul descriptor storage");

/* Matrix layouts: the 64 bytes the header gives hold the fixed fields. */
struct layout {
    int32_t type, order;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;
    int32_t set;
    int64_t stride;
};
_Static_assert(sizeof(struct layout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "layout storage");

GPUSIM_EXPORT cublasStatus_t cublasLtMatmulDescInit_internal(cublasLtMatmulDesc_t desc, size_t size,
                                                             cublasComputeType_t computeType,
                                                             cudaDataType_t scaleType) {
    if (!desc || size < sizeof(struct attrs))
        return CUBLAS_STATUS_INVALID_VALUE;
    struct attrs *a = (struct attrs *)desc;
    memset(a, 0, sizeof *a);
    int32_t ct = computeType, st = scaleType;
    attr_set(a, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &ct, sizeof ct);
    attr_set(a, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &st, sizeof st);
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t computeType,
                                                      cudaDataType_t scaleType) {
    if (!desc)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtMatmulDesc_t d = calloc(1, sizeof *d);
    if (!d)
        return CUBLAS_STATUS_ALLOC_FAILED;
    cublasLtMatmulDescInit_internal(d, sizeof *d, computeType, scaleType);
    *desc = d;
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
    free(desc);
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                            cublasLtMatmulDescAttributes_t attr, const void *buf,
                                                            size_t size) {
    if (!desc)
        return CUBLAS_STATUS_INVALID_VALUE;
    return attr_set((struct attrs *)desc, (uint32_t)attr, buf, size);
}

GPUSIM_EXPORT cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc,
                                                            cublasLtMatmulDescAttributes_t attr, void *buf,
                                                            size_t size, size_t *written) {
    if (!desc)
        return CUBLAS_STATUS_INVALID_VALUE;
    size_t natural = attr == CUBLASLT_MATMUL_DESC_BIAS_POINTER || attr == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER ||
                             attr == CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE ||
                             attr == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD ||
                             attr == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE ||
                             attr == CUBLASLT_MATMUL_DESC_A_SCALE_POINTER ||
                             attr == CUBLASLT_MATMUL_DESC_B_SCALE_POINTER ||
                             attr == CUBLASLT_MATMUL_DESC_C_SCALE_POINTER ||
                             attr == CUBLASLT_MATMUL_DESC_D_SCALE_POINTER ||
                             attr == CUBLASLT_MATMUL_DESC_AMAX_D_POINTER
                         ? 8
                         : 4;
    return attr_get((const struct attrs *)desc, (uint32_t)attr, buf, size, written, natural);
}

GPUSIM_EXPORT cublasStatus_t cublasLtMatrixLayoutInit_internal(cublasLtMatrixLayout_t layout, size_t size,
                                                               cudaDataType type, uint64_t rows, uint64_t cols,
                                                               int64_t ld) {
    if (!layout || size < sizeof(struct layout))
        return CUBLAS_STATUS_INVALID_VALUE;
    struct layout *l = (struct layout *)layout;
    *l = (struct layout){.type = type, .order = CUBLASLT_ORDER_COL, .rows = rows, .cols = cols, .ld = ld,
                         .batch = 1};
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType type,
                                                        uint64_t rows, uint64_t cols, int64_t ld) {
    if (!layout)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtMatrixLayout_t l = calloc(1, sizeof *l);
    if (!l)
        return CUBLAS_STATUS_ALLOC_FAILED;
    cublasLtMatrixLayoutInit_internal(l, sizeof *l, type, rows, cols, ld);
    *layout = l;
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasLtMatrixLayoutDestroy(const cublasLtMatrixLayout_t layout) {
    free(layout);
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                              cublasLtMatrixLayoutAttribute_t attr,
                                                              const void *buf, size_t size) {
    if (!layout || !buf || size == 0 || size > 8)
        return CUBLAS_STATUS_INVALID_VALUE;
    struct layout *l = (struct layout *)layout;
    int64_t v = 0;
    memcpy(&v, buf, size);
    if (size == 4)
        v = (int32_t)v;
    switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: l->type = (int32_t)v; break;
    case CUBLASLT_MATRIX_LAYOUT_ORDER: l->order = (int32_t)v; break;
    case CUBLASLT_MATRIX_LAYOUT_ROWS: l->rows = (uint64_t)v; break;
    case CUBLASLT_MATRIX_LAYOUT_COLS: l->cols = (uint64_t)v; break;
    case CUBLASLT_MATRIX_LAYOUT_LD: l->ld = v; break;
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: l->batch = (int32_t)v; break;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: l->stride = v; break;
    default: l->set |= 1; break; /* accepted, and not needed to place the work */
    }
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t layout,
                                                              cublasLtMatrixLayoutAttribute_t attr, void *buf,
                                                              size_t size, size_t *written) {
    if (!layout)
        return CUBLAS_STATUS_INVALID_VALUE;
    const struct layout *l = (const struct layout *)layout;
    int64_t v;
    size_t natural = 4;
    switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: v = l->type; break;
    case CUBLASLT_MATRIX_LAYOUT_ORDER: v = l->order; break;
    case CUBLASLT_MATRIX_LAYOUT_ROWS: v = (int64_t)l->rows, natural = 8; break;
    case CUBLASLT_MATRIX_LAYOUT_COLS: v = (int64_t)l->cols, natural = 8; break;
    case CUBLASLT_MATRIX_LAYOUT_LD: v = l->ld, natural = 8; break;
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: v = l->batch; break;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: v = l->stride, natural = 8; break;
    default: v = 0; break;
    }
    if (written)
        *written = natural;
    if (!buf || size == 0)
        return written ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    if (size < natural)
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(buf, &v, natural);
    return CUBLAS_STATUS_SUCCESS;
}

_Static_assert(sizeof(struct attrs) <= sizeof(cublasLtMatmulDescOpaque_t), "preference storage");

/* Preferences: stored as pairs in a library-made block (the header's 64 bytes
 * are too few for pairs, so Init keeps a pointer to one). */
GPUSIM_EXPORT cublasStatus_t cublasLtMatmulPreferenceInit_internal(cublasLtMatmulPreference_t pref, size_t size) {
    if (!pref || size < sizeof(void *))
        return CUBLAS_STATUS_INVALID_VALUE;
    struct attrs *a = calloc(1, sizeof *a);
    if (!a)
        return CUBLAS_STATUS_ALLOC_FAILED;
    memcpy(pref, &a, sizeof a);
    return CUBLAS_STATUS_SUCCESS;
}

static struct attrs *pref_attrs(cublasLtMatmulPreference_t pref) {
    struct attrs *a = NULL;
    if (pref)
        memcpy(&a, pref, sizeof a);
    return a;
}

GPUSIM_EXPORT cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
    if (!pref)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtMatmulPreference_t p = calloc(1, sizeof *p);
    if (!p)
        return CUBLAS_STATUS_ALLOC_FAILED;
    cublasStatus_t s = cublasLtMatmulPreferenceInit_internal(p, sizeof *p);
    if (s != CUBLAS_STATUS_SUCCESS) {
        free(p);
        return s;
    }
    *pref = p;
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    free(pref_attrs(pref));
    free(pref);
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                                  cublasLtMatmulPreferenceAttributes_t attr,
                                                                  const void *buf, size_t size) {
    struct attrs *a = pref_attrs(pref);
    if (!a)
        return CUBLAS_STATUS_INVALID_VALUE;
    return attr_set(a, (uint32_t)attr, buf, size);
}

GPUSIM_EXPORT cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                                  cublasLtMatmulPreferenceAttributes_t attr,
                                                                  void *buf, size_t size, size_t *written) {
    struct attrs *a = pref_attrs(pref);
    if (!a)
        return CUBLAS_STATUS_INVALID_VALUE;
    return attr_get(a, (uint32_t)attr, buf, size, written,
                    attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES ? 8 : 4);
}

/* ------------------------------------------------------------------ algorithms */

GPUSIM_EXPORT cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle,
                                                            cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t A,
                                                            cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C,
                                                            cublasLtMatrixLayout_t D,
                                                            cublasLtMatmulPreference_t pref, int requested,
                                                            cublasLtMatmulHeuristicResult_t results[],
                                                            int *returned) {
    if (!lt_ok(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!desc || !A || !B || !C || !D || requested <= 0 || !results || !returned)
        return CUBLAS_STATUS_INVALID_VALUE;
    memset(&results[0], 0, sizeof results[0]);
    results[0].algo.data[0] = 1; /* the simulated algorithm */
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasLtMatmulAlgoInit(cublasLtHandle_t handle, cublasComputeType_t computeType,
                                                    cudaDataType_t scaleType, cudaDataType_t Atype,
                                                    cudaDataType_t Btype, cudaDataType_t Ctype, cudaDataType_t Dtype,
                                                    int algoId, cublasLtMatmulAlgo_t *algo) {
    if (!lt_ok(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!algo)
        return CUBLAS_STATUS_INVALID_VALUE;
    memset(algo, 0, sizeof *algo);
    algo->data[0] = (uint64_t)algoId + 1;
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasLtMatmulAlgoCheck(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                     cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                                                     cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
                                                     const cublasLtMatmulAlgo_t *algo,
                                                     cublasLtMatmulHeuristicResult_t *result) {
    if (!lt_ok(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!desc || !A || !B || !C || !D || !algo || !result)
        return CUBLAS_STATUS_INVALID_VALUE;
    memset(result, 0, sizeof *result);
    result->algo = *algo;
    result->state = CUBLAS_STATUS_SUCCESS;
    result->wavesCount = 1.0f;
    return CUBLAS_STATUS_SUCCESS;
}

GPUSIM_EXPORT cublasStatus_t cublasLtMatmulAlgoConfigSetAttribute(cublasLtMatmulAlgo_t *algo,
                                                                  cublasLtMatmulAlgoConfigAttributes_t attr,
                                                                  const void *buf, size_t size) {
    return algo && buf ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

GPUSIM_EXPORT cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t *algo,
                                                                  cublasLtMatmulAlgoConfigAttributes_t attr,
                                                                  void *buf, size_t size, size_t *written) {
    if (!algo || (!buf && !written))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (written)
        *written = 4;
    if (buf && size >= 4)
        memset(buf, 0, 4);
    return CUBLAS_STATUS_SUCCESS;
}

/* ------------------------------------------------------------------ matmul */

static const char *epilogue_suffix(uint64_t e) {
    switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "";
    case CUBLASLT_EPILOGUE_RELU: return "_relu";
    case CUBLASLT_EPILOGUE_BIAS: return "_bias";
    case CUBLASLT_EPILOGUE_RELU_BIAS: return "_relu_bias";
    case CUBLASLT_EPILOGUE_GELU: return "_gelu";
    case CUBLASLT_EPILOGUE_GELU_BIAS: return "_gelu_bias";
    case CUBLASLT_EPILOGUE_GELU_AUX: return "_gelu_aux";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "_gelu_aux_bias";
    case CUBLASLT_EPILOGUE_BGRADA: return "_bgrada";
    case CUBLASLT_EPILOGUE_BGRADB: return "_bgradb";
    case CUBLASLT_EPILOGUE_DGELU: return "_dgelu";
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: return "_dgelu_bgrad";
    default: return "_epilogue";
    }
}

static char op_letter(uint64_t op) { return op == CUBLAS_OP_N ? 'n' : op == CUBLAS_OP_T ? 't' : 'c'; }

/* D = op(A) op(B): D is m x n, op(A) is m x k. */
GPUSIM_EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha,
                                            const void *A, cublasLtMatrixLayout_t Adesc, const void *B,
                                            cublasLtMatrixLayout_t Bdesc, const void *beta, const void *C,
                                            cublasLtMatrixLayout_t Cdesc, void *D, cublasLtMatrixLayout_t Ddesc,
                                            const cublasLtMatmulAlgo_t *algo, void *workspace,
                                            size_t workspaceSizeInBytes, cudaStream_t stream) {
    if (!lt_ok(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!desc || !Adesc || !Bdesc || !Cdesc || !Ddesc)
        return CUBLAS_STATUS_INVALID_VALUE;
    const struct attrs *d = (const struct attrs *)desc;
    const struct layout *a = (const struct layout *)Adesc, *dl = (const struct layout *)Ddesc;
    uint64_t ta = attr_value(d, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_N);
    uint64_t tb = attr_value(d, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
    uint64_t epilogue = attr_value(d, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DEFAULT);
    int64_t m = (int64_t)dl->rows, n = (int64_t)dl->cols;
    int64_t k = ta == CUBLAS_OP_N ? (int64_t)a->cols : (int64_t)a->rows;
    int64_t batch = dl->batch > 0 ? dl->batch : 1;
    if (m < 0 || n < 0 || k < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!m || !n)
        return CUBLAS_STATUS_SUCCESS;
    char name[128];
    snprintf(name, sizeof name, "simulated_cublasLt_matmul_%s_%c%c%s", simblas_type_name((cudaDataType)a->type),
             op_letter(ta), op_letter(tb), epilogue_suffix(epilogue));
    return simblas_launch_gemm(name, m, n, k, batch, (cudaDataType)a->type, stream);
}

/* A marker for tools: this libcublasLt simulates. */
GPUSIM_EXPORT const char gpusim_cublaslt[] = "gpusim: simulated cuBLASLt, no GPU";
