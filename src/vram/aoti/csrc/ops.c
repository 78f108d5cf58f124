/* Operations on tensors: copies, zeroing, clones, scalars, and the GEMM fallbacks a model
 * calls when Inductor keeps ATen's matrix products (aoti_torch_cuda_mm_out, addmm_out,
 * bmm_out, baddbmm_out; the cpu forms for models compiled for the host).
 *
 * The GEMMs check seed 004's contract here first (live handles, one dtype that a GEMM
 * supports, ranks, inner and batch dimensions, out's shape, one device of the right
 * type), so that a bad call is an error code and a message before vram is asked anything;
 * vram's BLAS (vram.mm(out=), addmm, bmm, baddbmm) then checks the rest (an out that
 * overlaps an input) and queues the work on the current stream.
 */
#include <stdio.h>
#include <string.h>

#include "vram_aoti.h"

static AOTITorchError stream_for(const vram_tensor *tensor, void **stream) {
    if (tensor->storage->device_type == DEVICE_CPU) {
        *stream = NULL;
        return AOTI_TORCH_SUCCESS;
    }
    return vram_current_stream(tensor->storage->device_index, stream);
}

/* ---- copies --------------------------------------------------------------------------- */
static AOTITorchError copy_desc(const vram_tensor_desc *dst, const vram_tensor_desc *src,
                                const vram_tensor *on, const char *what) {
    if (vram_cb.copy == NULL) {
        return vram_fail("%s: vram.aoti's callbacks are not installed", what);
    }
    void *stream;
    if (stream_for(on, &stream) != AOTI_TORCH_SUCCESS) {
        return AOTI_TORCH_FAILURE;
    }
    return vram_cb.copy(dst, src, stream) == 0 ? AOTI_TORCH_SUCCESS : AOTI_TORCH_FAILURE;
}

VRAM_EXPORT AOTITorchError aoti_torch_copy_(void *self, void *src, int32_t non_blocking) {
    (void)non_blocking; /* vram decides: device copies are stream-ordered, host ones sync */
    vram_tensor *dst_tensor = vram_defined_tensor(self, "aoti_torch_copy_ (self)");
    vram_tensor *src_tensor = dst_tensor ? vram_defined_tensor(src, "aoti_torch_copy_ (src)")
                                         : NULL;
    if (src_tensor == NULL) {
        return AOTI_TORCH_FAILURE;
    }
    vram_tensor_desc dst, from;
    vram_describe(dst_tensor, &dst);
    vram_describe(src_tensor, &from);
    const vram_tensor *on = dst_tensor->storage->device_type == DEVICE_CPU ? src_tensor
                                                                           : dst_tensor;
    return copy_desc(&dst, &from, on, "aoti_torch_copy_");
}

VRAM_EXPORT AOTITorchError aoti_torch_tensor_copy_(void *src, void *dst) {
    return aoti_torch_copy_(dst, src, 0);
}

VRAM_EXPORT AOTITorchError aoti_torch_zero_(void *self) {
    vram_tensor *tensor = vram_defined_tensor(self, "aoti_torch_zero_");
    if (tensor == NULL) {
        return AOTI_TORCH_FAILURE;
    }
    if (vram_cb.zero == NULL) {
        return vram_fail("aoti_torch_zero_: vram.aoti's callbacks are not installed");
    }
    void *stream;
    if (stream_for(tensor, &stream) != AOTI_TORCH_SUCCESS) {
        return AOTI_TORCH_FAILURE;
    }
    vram_tensor_desc desc;
    vram_describe(tensor, &desc);
    return vram_cb.zero(&desc, stream) == 0 ? AOTI_TORCH_SUCCESS : AOTI_TORCH_FAILURE;
}

/* Delete a half-made result, keeping the message of what failed. */
static AOTITorchError discard(void *made) {
    char message[512];
    snprintf(message, sizeof message, "%s", vram_aoti_last_error());
    (void)aoti_torch_delete_tensor_object(made);
    return vram_fail("%s", message);
}

VRAM_EXPORT AOTITorchError aoti_torch_clone(void *self, AtenTensorHandleOut ret) {
    vram_tensor *tensor = vram_defined_tensor(self, "aoti_torch_clone");
    if (tensor == NULL) {
        return AOTI_TORCH_FAILURE;
    }
    if (ret == NULL) {
        return vram_fail("aoti_torch_clone: the result pointer is NULL");
    }
    void *made;
    if (aoti_torch_empty_strided(tensor->ndim, tensor->sizes, NULL, tensor->dtype,
                                 tensor->storage->device_type, tensor->storage->device_index,
                                 &made) != AOTI_TORCH_SUCCESS) {
        return AOTI_TORCH_FAILURE;
    }
    if (aoti_torch_copy_(made, self, 0) != AOTI_TORCH_SUCCESS) {
        return discard(made);
    }
    *ret = made;
    return AOTI_TORCH_SUCCESS;
}

/* A copy with the same strides: every element from the first to the last one `self`
 * reaches, the gaps between them too (PyTorch's clone_preserve_strides). */
VRAM_EXPORT AOTITorchError aoti_torch_clone_preserve_strides(void *self, AtenTensorHandleOut ret) {
    const char *what = "aoti_torch_clone_preserve_strides";
    vram_tensor *tensor = vram_defined_tensor(self, what);
    if (tensor == NULL) {
        return AOTI_TORCH_FAILURE;
    }
    if (ret == NULL) {
        return vram_fail("%s: the result pointer is NULL", what);
    }
    int64_t span = vram_span(tensor->ndim, tensor->sizes, tensor->strides);
    vram_storage *storage =
        vram_allocate_storage(span * vram_element_size(tensor->dtype),
                              tensor->storage->device_type, tensor->storage->device_index, what);
    if (storage == NULL) {
        return AOTI_TORCH_FAILURE;
    }
    vram_tensor *made =
        vram_new_owner(storage, tensor->ndim, tensor->sizes, tensor->strides, 0, tensor->dtype);
    if (made == NULL) {
        return AOTI_TORCH_FAILURE;
    }
    if (span > 0) {
        int64_t one = 1;
        vram_tensor_desc dst, src;
        vram_describe(made, &dst);
        vram_describe(tensor, &src);
        dst.ndim = src.ndim = 1;
        dst.sizes = src.sizes = &span;
        dst.strides = src.strides = &one;
        if (copy_desc(&dst, &src, tensor, what) != AOTI_TORCH_SUCCESS) {
            return discard(made);
        }
    }
    *ret = made;
    return AOTI_TORCH_SUCCESS;
}

/* ---- scalars ------------------------------------------------------------------------------ */
static AOTITorchError item(void *handle, void *value, int32_t dtype, const char *what) {
    vram_tensor *tensor = vram_defined_tensor(handle, what);
    if (tensor == NULL) {
        return AOTI_TORCH_FAILURE;
    }
    if (value == NULL) {
        return vram_fail("%s: the result pointer is NULL", what);
    }
    if (vram_numel(tensor) != 1) {
        return vram_fail("%s: the tensor has %lld elements, not 1", what,
                         (long long)vram_numel(tensor));
    }
    vram_tensor_desc dst, src;
    vram_describe(tensor, &src);
    dst = src;
    dst.storage_id = 0;
    dst.base = value;
    dst.nbytes = vram_element_size(dtype);
    dst.offset = 0;
    dst.dtype = dtype;
    dst.device_type = DEVICE_CPU;
    dst.device_index = 0;
    dst.sized = 1;
    return copy_desc(&dst, &src, tensor, what);
}

static AOTITorchError scalar(const void *value, int32_t dtype, AtenTensorHandleOut ret,
                             const char *what) {
    if (ret == NULL) {
        return vram_fail("%s: the result pointer is NULL", what);
    }
    int64_t itemsize = vram_element_size(dtype);
    vram_storage *storage = vram_allocate_storage(itemsize, DEVICE_CPU, 0, what);
    if (storage == NULL) {
        return AOTI_TORCH_FAILURE;
    }
    memcpy(storage->data, value, (size_t)itemsize);
    vram_tensor *tensor = vram_new_owner(storage, 0, NULL, NULL, 0, dtype);
    if (tensor == NULL) {
        return AOTI_TORCH_FAILURE;
    }
    *ret = tensor;
    return AOTI_TORCH_SUCCESS;
}

#define SCALAR_SHIMS(name, ctype, code)                                                    \
    VRAM_EXPORT AOTITorchError aoti_torch_item_##name(void *tensor, ctype *ret_value) {   \
        return item(tensor, ret_value, code, "aoti_torch_item_" #name);                   \
    }                                                                                      \
    VRAM_EXPORT AOTITorchError aoti_torch_scalar_to_tensor_##name(ctype value,             \
                                                                  AtenTensorHandleOut ret) { \
        return scalar(&value, code, ret, "aoti_torch_scalar_to_tensor_" #name);           \
    }

SCALAR_SHIMS(float32, float, DTYPE_FLOAT32)
SCALAR_SHIMS(float64, double, DTYPE_FLOAT64)
SCALAR_SHIMS(uint8, uint8_t, DTYPE_UINT8)
SCALAR_SHIMS(uint16, uint16_t, DTYPE_UINT16)
SCALAR_SHIMS(uint32, uint32_t, DTYPE_UINT32)
SCALAR_SHIMS(uint64, uint64_t, DTYPE_UINT64)
SCALAR_SHIMS(int8, int8_t, DTYPE_INT8)
SCALAR_SHIMS(int16, int16_t, DTYPE_INT16)
SCALAR_SHIMS(int32, int32_t, DTYPE_INT32)
SCALAR_SHIMS(int64, int64_t, DTYPE_INT64)
SCALAR_SHIMS(bool, bool, DTYPE_BOOL)

/* c10::complex<T>: two Ts, as this struct (passed by value in the same registers) */
typedef struct {
    float re, im;
} __attribute__((aligned(8))) complex64;
typedef struct {
    double re, im;
} __attribute__((aligned(16))) complex128;

SCALAR_SHIMS(complex64, complex64, DTYPE_COMPLEX64)

VRAM_EXPORT AOTITorchError aoti_torch_scalar_to_tensor_complex128(complex128 value,
                                                                  AtenTensorHandleOut ret) {
    return scalar(&value, DTYPE_COMPLEX128, ret, "aoti_torch_scalar_to_tensor_complex128");
}

/* c10::Half and c10::BFloat16 are 16-bit structs: their bits travel as uint16_t. */
VRAM_EXPORT AOTITorchError aoti_torch_item_float16(void *tensor, uint16_t *ret_value) {
    return item(tensor, ret_value, DTYPE_FLOAT16, "aoti_torch_item_float16");
}

VRAM_EXPORT AOTITorchError aoti_torch_item_bfloat16(void *tensor, uint16_t *ret_value) {
    return item(tensor, ret_value, DTYPE_BFLOAT16, "aoti_torch_item_bfloat16");
}

/* ---- GEMMs -------------------------------------------------------------------------------- */
static const char *dtype_name(int32_t dtype) {
    switch (dtype) {
        case DTYPE_FLOAT16: return "float16";
        case DTYPE_BFLOAT16: return "bfloat16";
        case DTYPE_FLOAT32: return "float32";
        case DTYPE_FLOAT64: return "float64";
        default: return "a dtype matrix products do not support";
    }
}

static bool gemm_dtype(int32_t dtype) {
    return dtype == DTYPE_FLOAT16 || dtype == DTYPE_BFLOAT16 || dtype == DTYPE_FLOAT32 ||
           dtype == DTYPE_FLOAT64;
}

typedef struct gemm_args {
    const char *what;
    int32_t op;
    int32_t device_type; /* what every tensor must be on; -1: whatever self is on */
    int64_t rank;
    const char *names[4]; /* out, the factors, the bias */
} gemm_args;

static AOTITorchError check_operand(const gemm_args *call, const vram_tensor *t,
                                    const vram_tensor *self, const char *name) {
    if (t->dtype != self->dtype) {
        return vram_fail("%s: expected one dtype, but '%s' is %s (code %d) and '%s' is %s "
                         "(code %d)",
                         call->what, name, dtype_name(t->dtype), t->dtype, call->names[1],
                         dtype_name(self->dtype), self->dtype);
    }
    if (t->storage->device_type != self->storage->device_type ||
        (t->storage->device_type != DEVICE_CPU &&
         t->storage->device_index != self->storage->device_index)) {
        return vram_fail("%s: expected one device, but '%s' is on device type %d index %d and "
                         "'%s' on device type %d index %d",
                         call->what, name, t->storage->device_type, t->storage->device_index,
                         call->names[1], self->storage->device_type, self->storage->device_index);
    }
    return AOTI_TORCH_SUCCESS;
}

static AOTITorchError run_gemm(const gemm_args *call, void *out_h, void *a_h, void *b_h,
                               void *bias_h, double beta, double alpha) {
    vram_tensor *handles[4] = {NULL, NULL, NULL, NULL};
    void *given[4] = {out_h, a_h, b_h, bias_h};
    int count = bias_h != NULL || call->op == GEMM_ADDMM || call->op == GEMM_BADDBMM ? 4 : 3;
    for (int i = 0; i < count; i++) {
        char what[160];
        snprintf(what, sizeof what, "%s ('%s')", call->what, call->names[i]);
        handles[i] = vram_defined_tensor(given[i], what);
        if (handles[i] == NULL) {
            return AOTI_TORCH_FAILURE;
        }
    }
    vram_tensor *out = handles[0], *a = handles[1], *b = handles[2], *bias = handles[3];
    if (!gemm_dtype(a->dtype)) {
        return vram_fail("%s: '%s' has dtype code %d; matrix products support float16, "
                         "bfloat16, float32 and float64",
                         call->what, call->names[1], a->dtype);
    }
    if (call->device_type >= 0 && a->storage->device_type != call->device_type) {
        return vram_fail("%s: '%s' is on device type %d, not %s", call->what,
                         call->names[1], a->storage->device_type,
                         call->device_type == DEVICE_CUDA ? "cuda (1)" : "cpu (0)");
    }
    for (int i = 0; i < count; i++) {
        if (i != 1 && check_operand(call, handles[i], a, call->names[i])) {
            return AOTI_TORCH_FAILURE;
        }
    }
    for (int i = 1; i < 3; i++) {
        if (handles[i]->ndim != call->rank) {
            return vram_fail("%s: '%s' must be %lld-D, got %lld-D", call->what, call->names[i],
                             (long long)call->rank, (long long)handles[i]->ndim);
        }
    }
    int64_t r = call->rank;
    int64_t m = a->sizes[r - 2], k = a->sizes[r - 1], n = b->sizes[r - 1];
    if (b->sizes[r - 2] != k) {
        return vram_fail("%s: '%s' and '%s' shapes cannot be multiplied (inner dimensions "
                         "%lld and %lld)",
                         call->what, call->names[1], call->names[2], (long long)k,
                         (long long)b->sizes[r - 2]);
    }
    if (r == 3 && a->sizes[0] != b->sizes[0]) {
        return vram_fail("%s: '%s' and '%s' have %lld and %lld batches", call->what,
                         call->names[1], call->names[2], (long long)a->sizes[0],
                         (long long)b->sizes[0]);
    }
    int64_t shape[3] = {a->sizes[0], m, n};
    const int64_t *expected = r == 3 ? shape : shape + 1;
    bool shape_ok = out->ndim == r;
    for (int64_t d = 0; shape_ok && d < r; d++) {
        shape_ok = out->sizes[d] == expected[d];
    }
    if (!shape_ok) {
        return r == 3 ? vram_fail("%s: 'out' must have shape [%lld, %lld, %lld]", call->what,
                                  (long long)shape[0], (long long)m, (long long)n)
                      : vram_fail("%s: 'out' must have shape [%lld, %lld]", call->what,
                                  (long long)m, (long long)n);
    }
    if (bias != NULL) {
        if (bias->ndim > r) {
            return vram_fail("%s: '%s' is %lld-D; it must broadcast to the %lld-D result",
                             call->what, call->names[3], (long long)bias->ndim, (long long)r);
        }
        for (int64_t d = 0; d < bias->ndim; d++) {
            int64_t size = bias->sizes[bias->ndim - 1 - d], want = expected[r - 1 - d];
            if (size != 1 && size != want) {
                return vram_fail("%s: '%s' cannot be broadcast to the result (dimension "
                                 "%lld has %lld elements, the result %lld)",
                                 call->what, call->names[3], (long long)(bias->ndim - 1 - d),
                                 (long long)size, (long long)want);
            }
        }
    }
    if (vram_cb.gemm == NULL) {
        return vram_fail("%s: vram.aoti's callbacks are not installed", call->what);
    }
    void *stream;
    if (stream_for(a, &stream) != AOTI_TORCH_SUCCESS) {
        return AOTI_TORCH_FAILURE;
    }
    vram_tensor_desc descs[4];
    for (int i = 0; i < count; i++) {
        vram_describe(handles[i], &descs[i]);
    }
    int32_t result = vram_cb.gemm(call->op, &descs[0], &descs[1], &descs[2],
                                  bias != NULL ? &descs[3] : NULL, beta, alpha, stream);
    return result == 0 ? AOTI_TORCH_SUCCESS : AOTI_TORCH_FAILURE;
}

#define MM_NAMES {"out", "self", "mat2", "bias"}
#define ADDMM_NAMES {"out", "mat1", "mat2", "self"}
#define BADDBMM_NAMES {"out", "batch1", "batch2", "self"}

#define GEMM_SHIMS(prefix, device)                                                          \
    VRAM_EXPORT AOTITorchError prefix##mm_out(void *out, void *self, void *mat2) {          \
        gemm_args call = {#prefix "mm_out", GEMM_MM, device, 2, MM_NAMES};                  \
        return run_gemm(&call, out, self, mat2, NULL, 0.0, 1.0);                            \
    }                                                                                       \
    VRAM_EXPORT AOTITorchError prefix##addmm_out(void *out, void *self, void *mat1,         \
                                                 void *mat2, double beta, double alpha) {   \
        gemm_args call = {#prefix "addmm_out", GEMM_ADDMM, device, 2, ADDMM_NAMES};         \
        return run_gemm(&call, out, mat1, mat2, self, beta, alpha);                         \
    }                                                                                       \
    VRAM_EXPORT AOTITorchError prefix##bmm_out(void *out, void *self, void *mat2) {         \
        gemm_args call = {#prefix "bmm_out", GEMM_BMM, device, 3, MM_NAMES};                \
        return run_gemm(&call, out, self, mat2, NULL, 0.0, 1.0);                            \
    }                                                                                       \
    VRAM_EXPORT AOTITorchError prefix##baddbmm_out(void *out, void *self, void *batch1,     \
                                                   void *batch2, double beta, double alpha) { \
        gemm_args call = {#prefix "baddbmm_out", GEMM_BADDBMM, device, 3, BADDBMM_NAMES};   \
        return run_gemm(&call, out, batch1, batch2, self, beta, alpha);                     \
    }

/* out = a @ b + c @ d (Inductor's _mm_plus_mm), as two GEMMs on out's device */
VRAM_EXPORT AOTITorchError aoti_torch__mm_plus_mm_out(void *out, void *a, void *b, void *c,
                                                     void *d) {
    gemm_args first = {"aoti_torch__mm_plus_mm_out", GEMM_MM, -1, 2, {"out", "a", "b", "-"}};
    gemm_args second = {"aoti_torch__mm_plus_mm_out", GEMM_ADDMM, -1, 2, {"out", "c", "d", "out"}};
    if (run_gemm(&first, out, a, b, NULL, 0.0, 1.0) != AOTI_TORCH_SUCCESS) {
        return AOTI_TORCH_FAILURE;
    }
    return run_gemm(&second, out, c, d, out, 1.0, 1.0);
}

GEMM_SHIMS(aoti_torch_cuda_, DEVICE_CUDA)
GEMM_SHIMS(aoti_torch_cpu_, DEVICE_CPU)
GEMM_SHIMS(aoti_torch_, -1) /* shim_deprecated.h's device-generic names */
