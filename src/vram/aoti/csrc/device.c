/* Constants, grad mode, devices, streams and their guards, and the caching allocator's raw
 * pair.
 *
 * A thread's current device and stream are vram's (asked through the callbacks) unless a
 * guard made by a model is in force: the guard keeps its choice in thread-local state for
 * its lifetime, as c10's CUDAGuard and CUDAStreamGuard do, and only a change of device is
 * passed on to vram. A model's run is bracketed by a stream guard over the stream vram gave
 * it, so the shims it calls see that stream without a call into vram.
 */
#include <stdlib.h>

#include "vram_aoti.h"

/* ---- constants (PyTorch's numbering: c10::DeviceType, ScalarType, Layout, MemoryFormat) - */
VRAM_EXPORT int32_t aoti_torch_device_type_cpu(void) { return DEVICE_CPU; }
VRAM_EXPORT int32_t aoti_torch_device_type_cuda(void) { return DEVICE_CUDA; }
VRAM_EXPORT int32_t aoti_torch_device_type_xpu(void) { return 12; }
VRAM_EXPORT int32_t aoti_torch_device_type_mps(void) { return 13; }
VRAM_EXPORT int32_t aoti_torch_device_type_meta(void) { return 14; }
VRAM_EXPORT int32_t aoti_torch_device_type_privateuse1(void) { return 20; }

VRAM_EXPORT int32_t aoti_torch_dtype_uint8(void) { return DTYPE_UINT8; }
VRAM_EXPORT int32_t aoti_torch_dtype_int8(void) { return DTYPE_INT8; }
VRAM_EXPORT int32_t aoti_torch_dtype_int16(void) { return DTYPE_INT16; }
VRAM_EXPORT int32_t aoti_torch_dtype_int32(void) { return DTYPE_INT32; }
VRAM_EXPORT int32_t aoti_torch_dtype_int64(void) { return DTYPE_INT64; }
VRAM_EXPORT int32_t aoti_torch_dtype_float16(void) { return DTYPE_FLOAT16; }
VRAM_EXPORT int32_t aoti_torch_dtype_float32(void) { return DTYPE_FLOAT32; }
VRAM_EXPORT int32_t aoti_torch_dtype_float64(void) { return DTYPE_FLOAT64; }
VRAM_EXPORT int32_t aoti_torch_dtype_complex32(void) { return DTYPE_COMPLEX32; }
VRAM_EXPORT int32_t aoti_torch_dtype_complex64(void) { return DTYPE_COMPLEX64; }
VRAM_EXPORT int32_t aoti_torch_dtype_complex128(void) { return DTYPE_COMPLEX128; }
VRAM_EXPORT int32_t aoti_torch_dtype_bool(void) { return DTYPE_BOOL; }
VRAM_EXPORT int32_t aoti_torch_dtype_bfloat16(void) { return DTYPE_BFLOAT16; }
VRAM_EXPORT int32_t aoti_torch_dtype_float8_e5m2(void) { return DTYPE_FLOAT8_E5M2; }
VRAM_EXPORT int32_t aoti_torch_dtype_float8_e4m3fn(void) { return DTYPE_FLOAT8_E4M3FN; }
VRAM_EXPORT int32_t aoti_torch_dtype_float8_e5m2fnuz(void) { return DTYPE_FLOAT8_E5M2FNUZ; }
VRAM_EXPORT int32_t aoti_torch_dtype_float8_e4m3fnuz(void) { return DTYPE_FLOAT8_E4M3FNUZ; }
VRAM_EXPORT int32_t aoti_torch_dtype_uint16(void) { return DTYPE_UINT16; }
VRAM_EXPORT int32_t aoti_torch_dtype_uint32(void) { return DTYPE_UINT32; }
VRAM_EXPORT int32_t aoti_torch_dtype_uint64(void) { return DTYPE_UINT64; }
VRAM_EXPORT int32_t aoti_torch_dtype_float8_e8m0fnu(void) { return DTYPE_FLOAT8_E8M0FNU; }
VRAM_EXPORT int32_t aoti_torch_dtype_float4_e2m1fn_x2(void) { return DTYPE_FLOAT4_E2M1FN_X2; }

VRAM_EXPORT int32_t aoti_torch_layout_strided(void) { return 0; }
VRAM_EXPORT int32_t aoti_torch_layout_sparse_coo(void) { return 1; }
VRAM_EXPORT int32_t aoti_torch_layout_sparse_csr(void) { return 2; }
VRAM_EXPORT int32_t aoti_torch_layout__mkldnn(void) { return 3; }
VRAM_EXPORT int32_t aoti_torch_layout_sparse_csc(void) { return 4; }
VRAM_EXPORT int32_t aoti_torch_layout_sparse_bsr(void) { return 5; }
VRAM_EXPORT int32_t aoti_torch_layout_sparse_bsc(void) { return 6; }
VRAM_EXPORT int32_t aoti_torch_layout_jagged(void) { return 7; }

VRAM_EXPORT int32_t aoti_torch_memory_format_contiguous_format(void) { return 0; }
VRAM_EXPORT int32_t aoti_torch_memory_format_preserve_format(void) { return 1; }
VRAM_EXPORT int32_t aoti_torch_memory_format_channels_last(void) { return 2; }
VRAM_EXPORT int32_t aoti_torch_memory_format_channels_last_3d(void) { return 3; }

int64_t vram_element_size(int32_t dtype) {
    switch (dtype) {
        case DTYPE_UINT8:
        case DTYPE_INT8:
        case DTYPE_BOOL:
        case DTYPE_FLOAT8_E5M2:
        case DTYPE_FLOAT8_E4M3FN:
        case DTYPE_FLOAT8_E5M2FNUZ:
        case DTYPE_FLOAT8_E4M3FNUZ:
        case DTYPE_FLOAT8_E8M0FNU:
        case DTYPE_FLOAT4_E2M1FN_X2:
            return 1;
        case DTYPE_INT16:
        case DTYPE_FLOAT16:
        case DTYPE_BFLOAT16:
        case DTYPE_UINT16:
            return 2;
        case DTYPE_INT32:
        case DTYPE_FLOAT32:
        case DTYPE_COMPLEX32:
        case DTYPE_UINT32:
            return 4;
        case DTYPE_INT64:
        case DTYPE_FLOAT64:
        case DTYPE_COMPLEX64:
        case DTYPE_UINT64:
            return 8;
        case DTYPE_COMPLEX128:
            return 16;
        default:
            return 0;
    }
}

VRAM_EXPORT size_t aoti_torch_dtype_element_size(int32_t dtype) {
    return (size_t)vram_element_size(dtype);
}

/* ---- grad mode (vram has no autograd: only the flag the model sets and reads back) ------ */
static _Thread_local bool grad_disabled;

VRAM_EXPORT bool aoti_torch_grad_mode_is_enabled(void) {
    return !grad_disabled;
}

VRAM_EXPORT void aoti_torch_grad_mode_set_enabled(bool enabled) {
    grad_disabled = !enabled;
}

/* ---- the current device ------------------------------------------------------------------ */
static _Thread_local int32_t guarded_device = -1; /* a guard's device; -1: ask vram */

AOTITorchError vram_current_device(int32_t *device_index) {
    if (guarded_device >= 0) {
        *device_index = guarded_device;
        return AOTI_TORCH_SUCCESS;
    }
    if (vram_cb.current_device == NULL) {
        return vram_fail("vram.aoti's callbacks are not installed");
    }
    return vram_cb.current_device(device_index) == 0 ? AOTI_TORCH_SUCCESS : AOTI_TORCH_FAILURE;
}

static AOTITorchError switch_device(int32_t from, int32_t to) {
    if (from == to) {
        return AOTI_TORCH_SUCCESS;
    }
    if (vram_cb.set_device == NULL) {
        return vram_fail("vram.aoti's callbacks are not installed");
    }
    return vram_cb.set_device(to) == 0 ? AOTI_TORCH_SUCCESS : AOTI_TORCH_FAILURE;
}

VRAM_EXPORT AOTITorchError aoti_torch_get_current_device_index(int32_t *ret) {
    if (ret == NULL) {
        return vram_fail("aoti_torch_get_current_device_index: the result pointer is NULL");
    }
    return vram_current_device(ret);
}

typedef struct device_guard {
    int32_t device;          /* the device it made current */
    int32_t before;          /* the device current before it */
    int32_t guarded_before;  /* guarded_device before it */
} device_guard;

static AOTITorchError make_device_guard(int32_t device_index, void **ret, int32_t kind,
                                        const char *what) {
    if (ret == NULL) {
        return vram_fail("%s: the result pointer is NULL", what);
    }
    if (device_index < 0 || device_index >= MAX_DEVICES) {
        return vram_fail("%s: device index %d is out of range", what, device_index);
    }
    int32_t before;
    if (vram_current_device(&before) != AOTI_TORCH_SUCCESS) {
        return AOTI_TORCH_FAILURE;
    }
    device_guard *guard = malloc(sizeof(device_guard));
    if (guard == NULL) {
        return vram_fail("%s: out of host memory", what);
    }
    if (switch_device(before, device_index) != AOTI_TORCH_SUCCESS) {
        free(guard);
        return AOTI_TORCH_FAILURE;
    }
    guard->device = device_index;
    guard->before = before;
    guard->guarded_before = guarded_device;
    if (!vram_register(guard, kind)) {
        (void)switch_device(device_index, before);
        free(guard);
        return vram_fail("%s: out of host memory", what);
    }
    guarded_device = device_index;
    *ret = guard;
    return AOTI_TORCH_SUCCESS;
}

static AOTITorchError delete_device_guard(void *handle, int32_t kind, const char *what) {
    if (handle == NULL || !vram_unregister(handle, kind)) {
        return vram_fail("%s: %p is not a live guard", what, handle);
    }
    device_guard *guard = handle;
    AOTITorchError result = switch_device(guard->device, guard->before);
    guarded_device = guard->guarded_before;
    free(guard);
    return result;
}

static AOTITorchError set_guard_index(void *handle, int32_t device_index, int32_t kind,
                                      const char *what) {
    if (handle == NULL || !vram_is_live(handle, kind)) {
        return vram_fail("%s: %p is not a live guard", what, handle);
    }
    if (device_index < 0 || device_index >= MAX_DEVICES) {
        return vram_fail("%s: device index %d is out of range", what, device_index);
    }
    device_guard *guard = handle;
    if (switch_device(guard->device, device_index) != AOTI_TORCH_SUCCESS) {
        return AOTI_TORCH_FAILURE;
    }
    guard->device = device_index;
    guarded_device = device_index;
    return AOTI_TORCH_SUCCESS;
}

/* the CUDA guard and the device-generic one are the same guard */
#define GUARD_SHIMS(create, remove, set_index)                                              \
    VRAM_EXPORT AOTITorchError create(int32_t device_index, void **ret) {                    \
        return make_device_guard(device_index, ret, KIND_DEVICE_GUARD, #create);              \
    }                                                                                        \
    VRAM_EXPORT AOTITorchError remove(void *guard) {                                         \
        return delete_device_guard(guard, KIND_DEVICE_GUARD, #remove);                       \
    }                                                                                        \
    VRAM_EXPORT AOTITorchError set_index(void *guard, int32_t device_index) {               \
        return set_guard_index(guard, device_index, KIND_DEVICE_GUARD, #set_index);         \
    }

GUARD_SHIMS(aoti_torch_create_cuda_guard, aoti_torch_delete_cuda_guard,
            aoti_torch_cuda_guard_set_index)
GUARD_SHIMS(aoti_torch_create_device_guard, aoti_torch_delete_device_guard,
            aoti_torch_device_guard_set_index)

/* ---- the current stream ------------------------------------------------------------------ */
static _Thread_local void *guarded_stream[MAX_DEVICES];
static _Thread_local bool stream_guarded[MAX_DEVICES];

AOTITorchError vram_current_stream(int32_t device_index, void **stream) {
    if (device_index < 0) {
        if (vram_current_device(&device_index) != AOTI_TORCH_SUCCESS) {
            return AOTI_TORCH_FAILURE;
        }
    }
    if (device_index < MAX_DEVICES && stream_guarded[device_index]) {
        *stream = guarded_stream[device_index];
        return AOTI_TORCH_SUCCESS;
    }
    if (vram_cb.current_stream == NULL) {
        return vram_fail("vram.aoti's callbacks are not installed");
    }
    return vram_cb.current_stream(device_index, stream) == 0 ? AOTI_TORCH_SUCCESS
                                                              : AOTI_TORCH_FAILURE;
}

VRAM_EXPORT AOTITorchError aoti_torch_get_current_cuda_stream(int32_t device_index,
                                                              void **ret_stream) {
    if (ret_stream == NULL) {
        return vram_fail("aoti_torch_get_current_cuda_stream: the result pointer is NULL");
    }
    return vram_current_stream(device_index, ret_stream);
}

typedef struct stream_guard {
    void *device_guard;   /* the device_guard it holds for its device */
    int32_t device;
    void *stream_before;  /* what the thread had for the device before it */
    bool guarded_before;
} stream_guard;

VRAM_EXPORT AOTITorchError aoti_torch_create_cuda_stream_guard(void *stream, int32_t device_index,
                                                               void **ret) {
    const char *what = "aoti_torch_create_cuda_stream_guard";
    if (ret == NULL) {
        return vram_fail("%s: the result pointer is NULL", what);
    }
    stream_guard *guard = malloc(sizeof(stream_guard));
    if (guard == NULL) {
        return vram_fail("%s: out of host memory", what);
    }
    if (make_device_guard(device_index, &guard->device_guard, KIND_DEVICE_GUARD, what)) {
        free(guard);
        return AOTI_TORCH_FAILURE;
    }
    guard->device = device_index;
    guard->stream_before = guarded_stream[device_index];
    guard->guarded_before = stream_guarded[device_index];
    if (!vram_register(guard, KIND_STREAM_GUARD)) {
        (void)delete_device_guard(guard->device_guard, KIND_DEVICE_GUARD, what);
        free(guard);
        return vram_fail("%s: out of host memory", what);
    }
    guarded_stream[device_index] = stream;
    stream_guarded[device_index] = true;
    *ret = guard;
    return AOTI_TORCH_SUCCESS;
}

VRAM_EXPORT AOTITorchError aoti_torch_delete_cuda_stream_guard(void *handle) {
    const char *what = "aoti_torch_delete_cuda_stream_guard";
    if (handle == NULL || !vram_unregister(handle, KIND_STREAM_GUARD)) {
        return vram_fail("%s: %p is not a live stream guard", what, handle);
    }
    stream_guard *guard = handle;
    guarded_stream[guard->device] = guard->stream_before;
    stream_guarded[guard->device] = guard->guarded_before;
    AOTITorchError result = delete_device_guard(guard->device_guard, KIND_DEVICE_GUARD, what);
    free(guard);
    return result;
}

/* The device-generic stream handle: a stream and its device. */
typedef struct stream_handle {
    void *stream;
    int32_t device;
} stream_handle;

VRAM_EXPORT AOTITorchError aoti_torch_get_current_stream(int32_t device_index, void **ret) {
    const char *what = "aoti_torch_get_current_stream";
    if (ret == NULL) {
        return vram_fail("%s: the result pointer is NULL", what);
    }
    stream_handle *handle = malloc(sizeof(stream_handle));
    if (handle == NULL) {
        return vram_fail("%s: out of host memory", what);
    }
    handle->device = device_index;
    if (vram_current_stream(device_index, &handle->stream) != AOTI_TORCH_SUCCESS ||
        !vram_register(handle, KIND_STREAM)) {
        free(handle);
        return AOTI_TORCH_FAILURE;
    }
    *ret = handle;
    return AOTI_TORCH_SUCCESS;
}

VRAM_EXPORT AOTITorchError aoti_torch_delete_stream(void *handle) {
    if (handle == NULL || !vram_unregister(handle, KIND_STREAM)) {
        return vram_fail("aoti_torch_delete_stream: %p is not a live stream handle", handle);
    }
    free(handle);
    return AOTI_TORCH_SUCCESS;
}

VRAM_EXPORT AOTITorchError aoti_torch_stream_id(void *handle, int64_t *ret) {
    if (handle == NULL || !vram_is_live(handle, KIND_STREAM)) {
        return vram_fail("aoti_torch_stream_id: %p is not a live stream handle", handle);
    }
    if (ret == NULL) {
        return vram_fail("aoti_torch_stream_id: the result pointer is NULL");
    }
    *ret = (int64_t)(uintptr_t)((stream_handle *)handle)->stream;
    return AOTI_TORCH_SUCCESS;
}

/* ---- the caching allocator's raw pair (weights with weight_use_caching_allocator) ------- */
VRAM_EXPORT AOTITorchError aoti_torch_cuda_caching_allocator_raw_alloc(uint64_t nbytes,
                                                                       void **ret) {
    const char *what = "aoti_torch_cuda_caching_allocator_raw_alloc";
    if (ret == NULL) {
        return vram_fail("%s: the result pointer is NULL", what);
    }
    *ret = NULL;
    if (nbytes == 0) {
        return AOTI_TORCH_SUCCESS;
    }
    if (vram_cb.raw_alloc == NULL) {
        return vram_fail("%s: vram.aoti's callbacks are not installed", what);
    }
    int32_t device;
    void *stream;
    if (vram_current_device(&device) || vram_current_stream(device, &stream)) {
        return AOTI_TORCH_FAILURE;
    }
    *ret = vram_cb.raw_alloc((size_t)nbytes, device, stream);
    if (*ret == NULL) {
        return vram_fail("%s: vram's caching allocator could not allocate %llu bytes on device "
                         "%d (%s)",
                         what, (unsigned long long)nbytes, device, vram_aoti_last_error());
    }
    return AOTI_TORCH_SUCCESS;
}

VRAM_EXPORT AOTITorchError aoti_torch_cuda_caching_allocator_raw_delete(void *ptr) {
    if (ptr == NULL) {
        return AOTI_TORCH_SUCCESS;
    }
    if (vram_cb.raw_free == NULL) {
        return vram_fail("aoti_torch_cuda_caching_allocator_raw_delete: vram.aoti's callbacks "
                         "are not installed");
    }
    return vram_cb.raw_free(ptr) == 0 ? AOTI_TORCH_SUCCESS : AOTI_TORCH_FAILURE;
}
