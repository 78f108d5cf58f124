/* vram's AOTInductor shim library: what the files of this folder share.
 *
 * An AOTInductor-compiled model imports C symbols named in PyTorch's
 * torch/csrc/inductor/aoti_torch/c/shim.h (aoti_torch_*), a stable C ABI around an opaque
 * tensor handle. This library defines them over vram: the handle is a small struct of its
 * own (below), and every decision (where memory comes from, which stream is current, how a
 * GEMM runs, how bytes are copied) is a call into vram through the callback table that
 * vram.aoti installs before any model is loaded.
 *
 * Rules the code keeps:
 * - No shim crashes on bad input: a handle is looked up in the registry of live objects
 *   before it is read, so a NULL, freed or foreign pointer is an error code and a message
 *   (vram_aoti_last_error), never a dereference.
 * - No callback runs while the registry's lock is held: a callback enters Python, and
 *   Python may call back into this library on the same or another thread.
 * - Storages are reference counted; the last tensor that views one gives its memory back
 *   to whoever made it (vram's allocator, the C heap, or nobody for borrowed memory).
 */
#ifndef VRAM_AOTI_H
#define VRAM_AOTI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VRAM_EXPORT __attribute__((visibility("default")))

typedef int32_t AOTITorchError;
typedef void **AtenTensorHandleOut; /* where a shim writes a new handle */
#define AOTI_TORCH_SUCCESS 0
#define AOTI_TORCH_FAILURE 1

/* c10::DeviceType codes (aoti_torch_device_type_*) */
#define DEVICE_CPU 0
#define DEVICE_CUDA 1

/* c10::ScalarType codes (aoti_torch_dtype_*) */
#define DTYPE_UINT8 0
#define DTYPE_INT8 1
#define DTYPE_INT16 2
#define DTYPE_INT32 3
#define DTYPE_INT64 4
#define DTYPE_FLOAT16 5
#define DTYPE_FLOAT32 6
#define DTYPE_FLOAT64 7
#define DTYPE_COMPLEX32 8
#define DTYPE_COMPLEX64 9
#define DTYPE_COMPLEX128 10
#define DTYPE_BOOL 11
#define DTYPE_BFLOAT16 15
#define DTYPE_FLOAT8_E5M2 23
#define DTYPE_FLOAT8_E4M3FN 24
#define DTYPE_FLOAT8_E5M2FNUZ 25
#define DTYPE_FLOAT8_E4M3FNUZ 26
#define DTYPE_UINT16 27
#define DTYPE_UINT32 28
#define DTYPE_UINT64 29
#define DTYPE_FLOAT8_E8M0FNU 44
#define DTYPE_FLOAT4_E2M1FN_X2 45 /* two 4-bit values a byte */

#define MAX_DEVICES 64 /* device indices a thread's current stream is kept for */
#define INLINE_DIMS 6  /* dimensions a tensor keeps without a heap allocation */

/* Who gives a storage's memory back when its last tensor goes. */
enum storage_origin {
    FROM_ALLOCATOR = 0, /* vram's caching allocator: the free callback */
    FROM_HOST = 1,      /* this library's host allocation: free() */
    BORROWED = 2,       /* someone else's (model constants, inputs, taken outputs) */
};

typedef struct vram_storage {
    int64_t refs;    /* tensors viewing it; atomic */
    void *data;      /* first byte; NULL when nbytes is 0 */
    int64_t nbytes;
    void *stream;    /* the stream it was allocated on (vram's allocator only) */
    int32_t device_type;
    int32_t device_index;
    int32_t origin;  /* enum storage_origin; changed only under the registry's lock */
    bool sized;      /* nbytes is the memory's size (this library allocated it); borrowed
                        memory's size is unknown: nbytes is what its first view reaches */
} vram_storage;

/* A tensor handle (AtenTensorHandle): a strided view of a storage. storage is NULL for an
 * undefined tensor (aoti_torch_new_uninitialized_tensor). */
typedef struct vram_tensor {
    vram_storage *storage;
    int64_t ndim;
    int64_t offset; /* in elements */
    int32_t dtype;
    int64_t *sizes;   /* ndim entries: inline below, or on the heap */
    int64_t *strides; /* ndim entries, in elements */
    int64_t inline_dims[2 * INLINE_DIMS];
} vram_tensor;

/* What a callback sees of a tensor: plain values, no handle. */
typedef struct vram_tensor_desc {
    uintptr_t storage_id; /* the same for every view of one storage */
    void *base;           /* the storage's first byte */
    int64_t nbytes;       /* the storage's bytes */
    int64_t ndim;
    const int64_t *sizes;
    const int64_t *strides;
    int64_t offset; /* elements */
    int32_t dtype;
    int32_t device_type;
    int32_t device_index;
    int32_t sized; /* nbytes is the storage's size; else only what one view reaches */
} vram_tensor_desc;

/* GEMM callback ops */
#define GEMM_MM 0
#define GEMM_ADDMM 1
#define GEMM_BMM 2
#define GEMM_BADDBMM 3

/* The calls into vram (vram.aoti installs them). A callback that fails returns non-zero
 * (or NULL) after setting the message with vram_aoti_set_error. */
typedef struct vram_callbacks {
    /* vram.interop's pluggable-allocator pair: memory from the caching allocator */
    void *(*alloc)(size_t size, int32_t device, void *stream);
    void (*free)(void *ptr, size_t size, int32_t device, void *stream);
    /* the caching allocator's raw pair (aoti_torch_cuda_caching_allocator_raw_*) */
    void *(*raw_alloc)(size_t size, int32_t device, void *stream);
    int32_t (*raw_free)(void *ptr);
    int32_t (*current_stream)(int32_t device, void **stream);
    int32_t (*current_device)(int32_t *device);
    int32_t (*set_device)(int32_t device);
    int32_t (*gemm)(int32_t op, const vram_tensor_desc *out, const vram_tensor_desc *a,
                    const vram_tensor_desc *b, const vram_tensor_desc *bias, double beta,
                    double alpha, void *stream);
    int32_t (*copy)(const vram_tensor_desc *dst, const vram_tensor_desc *src, void *stream);
    int32_t (*zero)(const vram_tensor_desc *t, void *stream);
    void (*warn)(const char *message);
} vram_callbacks;

extern vram_callbacks vram_cb;

/* ---- errors (errors.c) ------------------------------------------------------------------ */
AOTITorchError vram_fail(const char *format, ...) __attribute__((format(printf, 1, 2)));
bool vram_in_model_call(void);
const char *vram_aoti_last_error(void);

/* ---- shims other files call (tensors.c) ----------------------------------------------- */
AOTITorchError aoti_torch_empty_strided(int64_t ndim, const int64_t *sizes_ptr,
                                        const int64_t *strides_ptr, int32_t dtype,
                                        int32_t device_type, int32_t device_index,
                                        AtenTensorHandleOut ret);
AOTITorchError aoti_torch_delete_tensor_object(void *handle);
AOTITorchError aoti_torch_copy_(void *self, void *src, int32_t non_blocking);

/* ---- the registry of live objects (registry.c) ----------------------------------------- */
enum object_kind { KIND_TENSOR = 1, KIND_DEVICE_GUARD, KIND_STREAM_GUARD, KIND_STREAM };

/* Adds it; false when out of host memory. */
bool vram_register(void *object, int32_t kind);
/* Removes it; false when it was not a live object of that kind. */
bool vram_unregister(void *object, int32_t kind);
bool vram_is_live(const void *object, int32_t kind);

/* ---- storages and tensors (handles.c) ---------------------------------------------------- */

/* The live tensor behind a handle, or NULL after setting an error naming `what`. */
vram_tensor *vram_tensor_of(const void *handle, const char *what);
/* Like vram_tensor_of, and also an error for an undefined tensor. */
vram_tensor *vram_defined_tensor(const void *handle, const char *what);

/* A new tensor over `storage` (one more reference to it); NULL with an error set. */
vram_tensor *vram_new_tensor(vram_storage *storage, int64_t ndim, const int64_t *sizes,
                             const int64_t *strides, int64_t offset, int32_t dtype);
/* The first tensor over a new storage; the storage is given back if it cannot be made. */
vram_tensor *vram_new_owner(vram_storage *storage, int64_t ndim, const int64_t *sizes,
                            const int64_t *strides, int64_t offset, int32_t dtype);
void vram_delete_tensor(vram_tensor *tensor);

/* Storage of `nbytes` on the device, from vram's allocator (cuda) or the heap (cpu). */
vram_storage *vram_allocate_storage(int64_t nbytes, int32_t device_type, int32_t device_index,
                                    const char *what);
vram_storage *vram_borrow_storage(void *data, int64_t nbytes, int32_t device_type,
                                  int32_t device_index);

void vram_describe(const vram_tensor *tensor, vram_tensor_desc *desc);
/* Elements from the first to the last one a view reaches, plus one; 0 when empty. */
int64_t vram_span(int64_t ndim, const int64_t *sizes, const int64_t *strides);
int64_t vram_numel(const vram_tensor *tensor);

/* ---- devices and dtypes (device.c) ----------------------------------------------------- */
int64_t vram_element_size(int32_t dtype); /* 0 for a code that is no dtype */
/* The stream work for `device_index` goes to: the stream guard's, else vram's current. */
AOTITorchError vram_current_stream(int32_t device_index, void **stream);
AOTITorchError vram_current_device(int32_t *device_index);

#endif
