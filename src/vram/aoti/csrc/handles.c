/* Storages and tensors.
 *
 * A storage is shared by the tensors that view it (refs, atomic). When the last one is
 * deleted its memory goes back to where it came from (enum storage_origin). Tensors are
 * registered live (registry.c) from their making to their deletion.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "vram_aoti.h"

#define HOST_ALIGNMENT 64 /* bytes; what vectorized host kernels may assume */

static pthread_mutex_t origins = PTHREAD_MUTEX_INITIALIZER; /* guards storages' origin */

vram_tensor *vram_tensor_of(const void *handle, const char *what) {
    if (handle == NULL) {
        vram_fail("%s: the tensor handle is NULL", what);
        return NULL;
    }
    if (!vram_is_live(handle, KIND_TENSOR)) {
        vram_fail("%s: %p is not a live tensor handle (deleted already, or not made by "
                  "vram.aoti)",
                  what, handle);
        return NULL;
    }
    return (vram_tensor *)handle;
}

vram_tensor *vram_defined_tensor(const void *handle, const char *what) {
    vram_tensor *tensor = vram_tensor_of(handle, what);
    if (tensor != NULL && tensor->storage == NULL) {
        vram_fail("%s: the tensor is undefined (made by aoti_torch_new_uninitialized_tensor)",
                  what);
        return NULL;
    }
    return tensor;
}

/* ---- storages --------------------------------------------------------------------------- */
static void release_storage(vram_storage *storage) {
    if (storage->data != NULL) {
        if (storage->origin == FROM_ALLOCATOR && vram_cb.free != NULL) {
            vram_cb.free(storage->data, (size_t)storage->nbytes, storage->device_index,
                         storage->stream);
        } else if (storage->origin == FROM_HOST) {
            free(storage->data);
        }
    }
    free(storage);
}

static void retain(vram_storage *storage) {
    __atomic_add_fetch(&storage->refs, 1, __ATOMIC_RELAXED);
}

static void release(vram_storage *storage) {
    if (__atomic_sub_fetch(&storage->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        release_storage(storage);
    }
}

vram_storage *vram_allocate_storage(int64_t nbytes, int32_t device_type, int32_t device_index,
                                    const char *what) {
    if (device_type != DEVICE_CPU && device_type != DEVICE_CUDA) {
        vram_fail("%s: device type %d is not supported (cpu %d and cuda %d are)", what,
                  device_type, DEVICE_CPU, DEVICE_CUDA);
        return NULL;
    }
    if (nbytes < 0) {
        vram_fail("%s: a negative size (%lld bytes)", what, (long long)nbytes);
        return NULL;
    }
    vram_storage *storage = calloc(1, sizeof(vram_storage));
    if (storage == NULL) {
        vram_fail("%s: out of host memory for a storage", what);
        return NULL;
    }
    storage->nbytes = nbytes;
    storage->device_type = device_type;
    storage->device_index = device_index;
    storage->origin = BORROWED; /* nothing to give back while data is NULL */
    storage->sized = true;
    if (nbytes == 0) {
        return storage;
    }
    if (device_type == DEVICE_CPU) {
        size_t rounded = ((size_t)nbytes + HOST_ALIGNMENT - 1) / HOST_ALIGNMENT * HOST_ALIGNMENT;
        storage->data = aligned_alloc(HOST_ALIGNMENT, rounded);
        storage->origin = FROM_HOST;
        if (storage->data == NULL) {
            free(storage);
            vram_fail("%s: out of host memory for %lld bytes", what, (long long)nbytes);
            return NULL;
        }
        return storage;
    }
    if (vram_cb.alloc == NULL) {
        free(storage);
        vram_fail("%s: vram.aoti's callbacks are not installed (load the library through "
                  "vram.aoti)",
                  what);
        return NULL;
    }
    void *stream = NULL;
    if (vram_current_stream(device_index, &stream) != AOTI_TORCH_SUCCESS) {
        free(storage);
        return NULL;
    }
    storage->data = vram_cb.alloc((size_t)nbytes, device_index, stream);
    storage->stream = stream;
    storage->origin = FROM_ALLOCATOR;
    if (storage->data == NULL) {
        free(storage);
        vram_fail("%s: vram's caching allocator could not allocate %lld bytes on device %d "
                  "(a RuntimeWarning says why)",
                  what, (long long)nbytes, device_index);
        return NULL;
    }
    return storage;
}

vram_storage *vram_borrow_storage(void *data, int64_t nbytes, int32_t device_type,
                                  int32_t device_index) {
    vram_storage *storage = calloc(1, sizeof(vram_storage));
    if (storage == NULL) {
        vram_fail("out of host memory for a storage");
        return NULL;
    }
    storage->data = data;
    storage->nbytes = nbytes;
    storage->device_type = device_type;
    storage->device_index = device_index;
    storage->origin = BORROWED;
    return storage;
}

/* ---- tensors ---------------------------------------------------------------------------- */
int64_t vram_span(int64_t ndim, const int64_t *sizes, const int64_t *strides) {
    int64_t span = 1;
    for (int64_t d = 0; d < ndim; d++) {
        if (sizes[d] == 0) {
            return 0;
        }
        span += (sizes[d] - 1) * strides[d];
    }
    return span;
}

int64_t vram_numel(const vram_tensor *tensor) {
    int64_t numel = 1;
    for (int64_t d = 0; d < tensor->ndim; d++) {
        numel *= tensor->sizes[d];
    }
    return numel;
}

vram_tensor *vram_new_tensor(vram_storage *storage, int64_t ndim, const int64_t *sizes,
                             const int64_t *strides, int64_t offset, int32_t dtype) {
    if (ndim < 0 || (ndim > 0 && sizes == NULL)) {
        vram_fail("a tensor needs ndim >= 0 and its sizes (got ndim %lld, sizes %p)",
                  (long long)ndim, (const void *)sizes);
        return NULL;
    }
    for (int64_t d = 0; d < ndim; d++) {
        if (sizes[d] < 0 || (strides != NULL && strides[d] < 0)) {
            vram_fail("dimension %lld has size %lld and stride %lld; both must be >= 0",
                      (long long)d, (long long)sizes[d],
                      (long long)(strides != NULL ? strides[d] : 0));
            return NULL;
        }
    }
    vram_tensor *tensor = calloc(1, sizeof(vram_tensor));
    if (tensor == NULL) {
        vram_fail("out of host memory for a tensor handle");
        return NULL;
    }
    if (ndim <= INLINE_DIMS) {
        tensor->sizes = tensor->inline_dims;
        tensor->strides = tensor->inline_dims + INLINE_DIMS;
    } else {
        tensor->sizes = malloc(2 * (size_t)ndim * sizeof(int64_t));
        if (tensor->sizes == NULL) {
            free(tensor);
            vram_fail("out of host memory for a tensor of %lld dimensions", (long long)ndim);
            return NULL;
        }
        tensor->strides = tensor->sizes + ndim;
    }
    int64_t step = 1;
    for (int64_t d = ndim - 1; d >= 0; d--) {
        tensor->sizes[d] = sizes[d];
        tensor->strides[d] = strides != NULL ? strides[d] : step;
        step *= sizes[d] > 1 ? sizes[d] : 1;
    }
    tensor->ndim = ndim;
    tensor->offset = offset;
    tensor->dtype = dtype;
    tensor->storage = storage;
    if (!vram_register(tensor, KIND_TENSOR)) {
        if (tensor->sizes != tensor->inline_dims) {
            free(tensor->sizes);
        }
        free(tensor);
        vram_fail("out of host memory for the registry of handles");
        return NULL;
    }
    if (storage != NULL) {
        retain(storage);
    }
    return tensor;
}

vram_tensor *vram_new_owner(vram_storage *storage, int64_t ndim, const int64_t *sizes,
                            const int64_t *strides, int64_t offset, int32_t dtype) {
    vram_tensor *tensor = vram_new_tensor(storage, ndim, sizes, strides, offset, dtype);
    if (tensor == NULL) {
        release_storage(storage); /* no tensor took it */
    }
    return tensor;
}

void vram_delete_tensor(vram_tensor *tensor) {
    vram_storage *storage = tensor->storage;
    if (tensor->sizes != tensor->inline_dims) {
        free(tensor->sizes);
    }
    free(tensor);
    if (storage != NULL) {
        release(storage);
    }
}

void vram_describe(const vram_tensor *tensor, vram_tensor_desc *desc) {
    const vram_storage *storage = tensor->storage;
    desc->storage_id = (uintptr_t)storage;
    desc->base = storage != NULL ? storage->data : NULL;
    desc->nbytes = storage != NULL ? storage->nbytes : 0;
    desc->ndim = tensor->ndim;
    desc->sizes = tensor->sizes;
    desc->strides = tensor->strides;
    desc->offset = tensor->offset;
    desc->dtype = tensor->dtype;
    desc->device_type = storage != NULL ? storage->device_type : DEVICE_CPU;
    desc->device_index = storage != NULL ? storage->device_index : 0;
    desc->sized = storage != NULL && storage->sized;
}

/* ---- what vram.aoti asks of handles ----------------------------------------------------- */
VRAM_EXPORT int32_t vram_aoti_describe(void *handle, vram_tensor_desc *desc) {
    vram_tensor *tensor = vram_tensor_of(handle, "vram_aoti_describe");
    if (tensor == NULL || desc == NULL) {
        return tensor == NULL ? AOTI_TORCH_FAILURE : vram_fail("vram_aoti_describe: desc is NULL");
    }
    vram_describe(tensor, desc);
    return AOTI_TORCH_SUCCESS;
}

/* Hand the memory of a tensor's storage to the caller: 1 when it came from vram's allocator
 * and exactly `views` tensors view it (the caller's handles: from now on the caller frees
 * the memory and the storage only borrows it), 0 when it is not this library's to give
 * (borrowed, host or empty memory, or memory other tensors still view: the caller keeps a
 * handle instead), -1 for a bad handle. */
VRAM_EXPORT int32_t vram_aoti_take_storage(void *handle, int64_t views, void **data,
                                           int64_t *nbytes, void **stream) {
    vram_tensor *tensor = vram_defined_tensor(handle, "vram_aoti_take_storage");
    if (tensor == NULL) {
        return -1;
    }
    pthread_mutex_lock(&origins);
    vram_storage *storage = tensor->storage;
    int32_t taken = storage->origin == FROM_ALLOCATOR && storage->data != NULL &&
                    __atomic_load_n(&storage->refs, __ATOMIC_ACQUIRE) == views;
    if (taken) {
        storage->origin = BORROWED;
    }
    pthread_mutex_unlock(&origins);
    *data = storage->data;
    *nbytes = storage->nbytes;
    *stream = storage->stream;
    return taken;
}
