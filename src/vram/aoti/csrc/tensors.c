/* Tensor handles: making, viewing, querying and deleting them (shim.h's first half).
 *
 * Semantics follow PyTorch's shim (torch/csrc/inductor/aoti_torch/shim_common.cpp and
 * inductor_ops.cpp): create_tensor_from_blob's `data` is the storage's first byte and the
 * tensor starts `storage_offset` elements in; _reinterpret_tensor adds its offset to the
 * tensor's own; _alloc_from_pool views a pool buffer at a byte offset.
 */
#include <stdlib.h>
#include <string.h>

#include "vram_aoti.h"

static AOTITorchError out_arg(void *ret, const char *what) {
    return ret == NULL ? vram_fail("%s: the result pointer is NULL", what) : AOTI_TORCH_SUCCESS;
}

static AOTITorchError known_dtype(int32_t dtype, const char *what) {
    if (vram_element_size(dtype) == 0) {
        return vram_fail("%s: %d is not a dtype code vram.aoti knows", what, dtype);
    }
    return AOTI_TORCH_SUCCESS;
}

/* A view of `storage` must stay inside it where its size is known. */
static AOTITorchError view_fits(const vram_storage *storage, int64_t ndim, const int64_t *sizes,
                                const int64_t *strides, int64_t offset, int32_t dtype,
                                const char *what) {
    if (offset < 0) {
        return vram_fail("%s: a negative storage offset (%lld)", what, (long long)offset);
    }
    if (storage == NULL || !storage->sized || strides == NULL) {
        return AOTI_TORCH_SUCCESS;
    }
    for (int64_t d = 0; d < ndim; d++) {
        if (sizes[d] < 0 || strides[d] < 0) {
            return vram_fail("%s: dimension %lld has size %lld and stride %lld", what,
                             (long long)d, (long long)sizes[d], (long long)strides[d]);
        }
    }
    int64_t span = vram_span(ndim, sizes, strides);
    int64_t end = span == 0 ? 0 : (offset + span) * vram_element_size(dtype);
    if (end > storage->nbytes) {
        return vram_fail("%s: the view reaches byte %lld of a storage of %lld bytes", what,
                         (long long)end, (long long)storage->nbytes);
    }
    return AOTI_TORCH_SUCCESS;
}

static AOTITorchError finish(vram_tensor *tensor, AtenTensorHandleOut ret) {
    if (tensor == NULL) {
        return AOTI_TORCH_FAILURE;
    }
    *ret = tensor;
    return AOTI_TORCH_SUCCESS;
}

/* ---- lifetime ----------------------------------------------------------------------------- */
VRAM_EXPORT AOTITorchError aoti_torch_delete_tensor_object(void *handle) {
    if (handle == NULL) {
        return vram_fail("aoti_torch_delete_tensor_object: the tensor handle is NULL");
    }
    if (!vram_unregister(handle, KIND_TENSOR)) {
        return vram_fail("aoti_torch_delete_tensor_object: %p is not a live tensor handle "
                         "(deleted already, or not made by vram.aoti)",
                         handle);
    }
    vram_delete_tensor((vram_tensor *)handle);
    return AOTI_TORCH_SUCCESS;
}

VRAM_EXPORT AOTITorchError aoti_torch_new_uninitialized_tensor(AtenTensorHandleOut ret) {
    if (out_arg(ret, "aoti_torch_new_uninitialized_tensor")) {
        return AOTI_TORCH_FAILURE;
    }
    return finish(vram_new_tensor(NULL, 0, NULL, NULL, 0, DTYPE_FLOAT32), ret);
}

static vram_tensor *alias(const vram_tensor *src) {
    return vram_new_tensor(src->storage, src->ndim, src->sizes, src->strides, src->offset,
                           src->dtype);
}

VRAM_EXPORT AOTITorchError aoti_torch_new_tensor_handle(void *orig, AtenTensorHandleOut ret) {
    vram_tensor *src = vram_tensor_of(orig, "aoti_torch_new_tensor_handle");
    if (src == NULL || out_arg(ret, "aoti_torch_new_tensor_handle")) {
        return AOTI_TORCH_FAILURE;
    }
    return finish(alias(src), ret);
}

VRAM_EXPORT AOTITorchError aoti_torch_assign_tensors_out(void *src, AtenTensorHandleOut ret) {
    vram_tensor *tensor = vram_tensor_of(src, "aoti_torch_assign_tensors_out");
    if (tensor == NULL || out_arg(ret, "aoti_torch_assign_tensors_out")) {
        return AOTI_TORCH_FAILURE;
    }
    return finish(alias(tensor), ret);
}

/* `dst` becomes another view of what `src` views (both handles stay live). */
VRAM_EXPORT AOTITorchError aoti_torch_assign_tensors(void *src, void *dst) {
    vram_tensor *from = vram_tensor_of(src, "aoti_torch_assign_tensors (src)");
    vram_tensor *to = from ? vram_tensor_of(dst, "aoti_torch_assign_tensors (dst)") : NULL;
    if (to == NULL) {
        return AOTI_TORCH_FAILURE;
    }
    if (from == to) {
        return AOTI_TORCH_SUCCESS;
    }
    /* a temporary alias holds the new metadata; then the two swap their contents */
    vram_tensor *copy = alias(from);
    if (copy == NULL) {
        return AOTI_TORCH_FAILURE;
    }
    vram_tensor keep = *to;
    bool to_inline = to->sizes == to->inline_dims;
    bool copy_inline = copy->sizes == copy->inline_dims;
    *to = *copy;
    *copy = keep;
    if (copy_inline) {
        to->sizes = to->inline_dims;
        to->strides = to->inline_dims + INLINE_DIMS;
    }
    if (to_inline) {
        copy->sizes = copy->inline_dims;
        copy->strides = copy->inline_dims + INLINE_DIMS;
    }
    return aoti_torch_delete_tensor_object(copy); /* releases what `dst` viewed before */
}

/* ---- making tensors --------------------------------------------------------------------- */
VRAM_EXPORT AOTITorchError aoti_torch_empty_strided(int64_t ndim, const int64_t *sizes_ptr,
                                                    const int64_t *strides_ptr, int32_t dtype,
                                                    int32_t device_type, int32_t device_index,
                                                    AtenTensorHandleOut ret) {
    const char *what = "aoti_torch_empty_strided";
    if (out_arg(ret, what) || known_dtype(dtype, what)) {
        return AOTI_TORCH_FAILURE;
    }
    if (ndim < 0 || (ndim > 0 && sizes_ptr == NULL)) {
        return vram_fail("%s: ndim %lld with sizes %p", what, (long long)ndim,
                         (const void *)sizes_ptr);
    }
    for (int64_t d = 0; d < ndim; d++) {
        if (sizes_ptr[d] < 0 || (strides_ptr != NULL && strides_ptr[d] < 0)) {
            return vram_fail("%s: dimension %lld has size %lld and stride %lld", what,
                             (long long)d, (long long)sizes_ptr[d],
                             (long long)(strides_ptr ? strides_ptr[d] : 0));
        }
    }
    int64_t span;
    if (strides_ptr != NULL) {
        span = vram_span(ndim, sizes_ptr, strides_ptr);
    } else {
        span = 1;
        for (int64_t d = 0; d < ndim; d++) {
            span *= sizes_ptr[d];
        }
    }
    vram_storage *storage = vram_allocate_storage(span * vram_element_size(dtype), device_type,
                                                  device_index, what);
    if (storage == NULL) {
        return AOTI_TORCH_FAILURE;
    }
    return finish(vram_new_owner(storage, ndim, sizes_ptr, strides_ptr, 0, dtype), ret);
}

VRAM_EXPORT AOTITorchError aoti_torch_create_tensor_from_blob_v2(
    void *data, int64_t ndim, const int64_t *sizes_ptr, const int64_t *strides_ptr,
    int64_t storage_offset, int32_t dtype, int32_t device_type, int32_t device_index,
    AtenTensorHandleOut ret, int32_t layout, const uint8_t *opaque_metadata,
    int64_t opaque_metadata_size) {
    (void)opaque_metadata;
    (void)opaque_metadata_size;
    const char *what = "aoti_torch_create_tensor_from_blob";
    if (out_arg(ret, what) || known_dtype(dtype, what)) {
        return AOTI_TORCH_FAILURE;
    }
    if (layout != 0) {
        return vram_fail("%s: layout %d is not supported (only strided, 0)", what, layout);
    }
    if (device_type != DEVICE_CPU && device_type != DEVICE_CUDA) {
        return vram_fail("%s: device type %d is not supported", what, device_type);
    }
    if (ndim < 0 || (ndim > 0 && (sizes_ptr == NULL || strides_ptr == NULL))) {
        return vram_fail("%s: ndim %lld needs sizes and strides", what, (long long)ndim);
    }
    if (storage_offset < 0) {
        return vram_fail("%s: a negative storage offset (%lld)", what, (long long)storage_offset);
    }
    if (data == NULL) { /* a tensor with no elements: PyTorch makes an empty one */
        return aoti_torch_empty_strided(ndim, sizes_ptr, strides_ptr, dtype, device_type,
                                        device_index, ret);
    }
    int64_t span = vram_span(ndim, sizes_ptr, strides_ptr);
    int64_t nbytes = span == 0 ? 0 : (storage_offset + span) * vram_element_size(dtype);
    vram_storage *storage = vram_borrow_storage(data, nbytes, device_type, device_index);
    if (storage == NULL) {
        return AOTI_TORCH_FAILURE;
    }
    return finish(vram_new_owner(storage, ndim, sizes_ptr, strides_ptr, storage_offset, dtype),
                  ret);
}

VRAM_EXPORT AOTITorchError aoti_torch_create_tensor_from_blob(
    void *data, int64_t ndim, const int64_t *sizes_ptr, const int64_t *strides_ptr,
    int64_t storage_offset, int32_t dtype, int32_t device_type, int32_t device_index,
    AtenTensorHandleOut ret) {
    return aoti_torch_create_tensor_from_blob_v2(data, ndim, sizes_ptr, strides_ptr,
                                                 storage_offset, dtype, device_type,
                                                 device_index, ret, 0, NULL, 0);
}

/* ---- views ------------------------------------------------------------------------------- */
static AOTITorchError view(vram_tensor *self, int64_t ndim, const int64_t *sizes,
                           const int64_t *strides, int64_t offset, int32_t dtype,
                           AtenTensorHandleOut ret, const char *what) {
    if (ndim < 0 || (ndim > 0 && (sizes == NULL || strides == NULL))) {
        return vram_fail("%s: ndim %lld needs sizes and strides", what, (long long)ndim);
    }
    if (view_fits(self->storage, ndim, sizes, strides, offset, dtype, what)) {
        return AOTI_TORCH_FAILURE;
    }
    return finish(vram_new_tensor(self->storage, ndim, sizes, strides, offset, dtype), ret);
}

VRAM_EXPORT AOTITorchError aoti_torch__reinterpret_tensor(void *self, int64_t ndim,
                                                          const int64_t *sizes_ptr,
                                                          const int64_t *strides_ptr,
                                                          int64_t offset_increment,
                                                          AtenTensorHandleOut ret) {
    const char *what = "aoti_torch__reinterpret_tensor";
    vram_tensor *tensor = vram_defined_tensor(self, what);
    if (tensor == NULL || out_arg(ret, what)) {
        return AOTI_TORCH_FAILURE;
    }
    return view(tensor, ndim, sizes_ptr, strides_ptr, tensor->offset + offset_increment,
                tensor->dtype, ret, what);
}

VRAM_EXPORT AOTITorchError aoti_torch_as_strided(void *self, const int64_t *sizes_ptr,
                                                 const int64_t *strides_ptr,
                                                 AtenTensorHandleOut ret) {
    const char *what = "aoti_torch_as_strided";
    vram_tensor *tensor = vram_defined_tensor(self, what);
    if (tensor == NULL || out_arg(ret, what)) {
        return AOTI_TORCH_FAILURE;
    }
    return view(tensor, tensor->ndim, sizes_ptr, strides_ptr, tensor->offset, tensor->dtype,
                ret, what);
}

VRAM_EXPORT AOTITorchError aoti_torch__alloc_from_pool(void *self, int64_t offset_bytes,
                                                       int32_t dtype, int64_t ndim,
                                                       const int64_t *sizes_ptr,
                                                       const int64_t *strides_ptr,
                                                       AtenTensorHandleOut ret) {
    const char *what = "aoti_torch__alloc_from_pool";
    vram_tensor *pool = vram_defined_tensor(self, what);
    if (pool == NULL || out_arg(ret, what) || known_dtype(dtype, what)) {
        return AOTI_TORCH_FAILURE;
    }
    if (pool->offset != 0) {
        return vram_fail("%s: the pool tensor must start at its storage's first element "
                         "(its offset is %lld)",
                         what, (long long)pool->offset);
    }
    int64_t itemsize = vram_element_size(dtype);
    if (offset_bytes < 0 || offset_bytes % itemsize != 0) {
        return vram_fail("%s: offset %lld bytes is not a multiple of the dtype's %lld bytes",
                         what, (long long)offset_bytes, (long long)itemsize);
    }
    return view(pool, ndim, sizes_ptr, strides_ptr, offset_bytes / itemsize, dtype, ret, what);
}

/* ---- attributes --------------------------------------------------------------------------- */
static void *data_pointer(const vram_tensor *tensor) {
    char *base = tensor->storage->data;
    return base == NULL ? NULL : base + tensor->offset * vram_element_size(tensor->dtype);
}

/* A getter: the live (DEFINED: and defined) tensor behind `handle`, then *ret = VALUE. */
#define GETTER(name, type, lookup, value)                                                  \
    VRAM_EXPORT AOTITorchError aoti_torch_##name(void *handle, type *ret) {                 \
        vram_tensor *tensor = lookup(handle, "aoti_torch_" #name);                          \
        if (tensor == NULL || out_arg(ret, "aoti_torch_" #name)) {                          \
            return AOTI_TORCH_FAILURE;                                                      \
        }                                                                                   \
        *ret = (value);                                                                     \
        return AOTI_TORCH_SUCCESS;                                                          \
    }

GETTER(get_data_ptr, void *, vram_defined_tensor, data_pointer(tensor))
GETTER(get_mutable_data_ptr, void *, vram_defined_tensor, data_pointer(tensor))
GETTER(get_const_data_ptr, const void *, vram_defined_tensor, data_pointer(tensor))
GETTER(get_storage_size, int64_t, vram_defined_tensor, tensor->storage->nbytes)
GETTER(get_storage_numel, int64_t, vram_defined_tensor,
       tensor->storage->nbytes / vram_element_size(tensor->dtype))
GETTER(get_dim, int64_t, vram_tensor_of, tensor->ndim)
GETTER(get_numel, int64_t, vram_tensor_of, tensor->storage == NULL ? 0 : vram_numel(tensor))
GETTER(get_sizes, int64_t *, vram_tensor_of, tensor->sizes)
GETTER(get_strides, int64_t *, vram_tensor_of, tensor->strides)
GETTER(get_dtype, int32_t, vram_tensor_of, tensor->dtype)
GETTER(get_device_type, int32_t, vram_defined_tensor, tensor->storage->device_type)
GETTER(get_device_index, int32_t, vram_defined_tensor,
       tensor->storage->device_type == DEVICE_CPU ? -1 : tensor->storage->device_index)
GETTER(get_layout, int32_t, vram_tensor_of, 0) /* strided */
GETTER(get_storage_offset, int64_t, vram_tensor_of, tensor->offset)
GETTER(is_defined, bool, vram_tensor_of, tensor->storage != NULL)

/* Dimension `d` of `tensor` (negative counts from the end), or -1 after an error. */
static int64_t dimension(const vram_tensor *tensor, int64_t d, const char *what) {
    int64_t wrapped = d < 0 ? d + tensor->ndim : d;
    if (wrapped < 0 || wrapped >= tensor->ndim) {
        vram_fail("%s: dimension %lld is out of range for a %lld-D tensor", what, (long long)d,
                  (long long)tensor->ndim);
        return -1;
    }
    return wrapped;
}

static AOTITorchError size_or_stride(void *handle, int64_t d, int64_t *ret, bool stride,
                                     const char *what) {
    vram_tensor *tensor = vram_tensor_of(handle, what);
    if (tensor == NULL || out_arg(ret, what)) {
        return AOTI_TORCH_FAILURE;
    }
    int64_t dim = dimension(tensor, d, what);
    if (dim < 0) {
        return AOTI_TORCH_FAILURE;
    }
    *ret = stride ? tensor->strides[dim] : tensor->sizes[dim];
    return AOTI_TORCH_SUCCESS;
}

VRAM_EXPORT AOTITorchError aoti_torch_get_size(void *handle, int64_t d, int64_t *ret) {
    return size_or_stride(handle, d, ret, false, "aoti_torch_get_size");
}

VRAM_EXPORT AOTITorchError aoti_torch_get_stride(void *handle, int64_t d, int64_t *ret) {
    return size_or_stride(handle, d, ret, true, "aoti_torch_get_stride");
}

VRAM_EXPORT AOTITorchError aoti_torch_is_contiguous(void *handle, bool *ret) {
    vram_tensor *tensor = vram_tensor_of(handle, "aoti_torch_is_contiguous");
    if (tensor == NULL || out_arg(ret, "aoti_torch_is_contiguous")) {
        return AOTI_TORCH_FAILURE;
    }
    bool contiguous = true;
    int64_t expected = 1;
    for (int64_t d = tensor->ndim - 1; d >= 0; d--) {
        if (tensor->sizes[d] == 0) {
            contiguous = true;
            break;
        }
        if (tensor->sizes[d] != 1) {
            if (tensor->strides[d] != expected) {
                contiguous = false;
            }
            expected *= tensor->sizes[d];
        }
    }
    *ret = contiguous;
    return AOTI_TORCH_SUCCESS;
}
