/* A stand-in for an AOTInductor-compiled CUDA model, for tests without torch or a GPU.
 *
 * It exports the model-container interface vram.aoti loads (AOTInductorModelContainer*)
 * and calls the shims as generated code does: guards, the current stream, empty_strided
 * intermediates, reinterpreted views of its constants, the GEMM fallbacks, handle
 * deletion. Its kernels are the shims' GEMMs, so it runs on vram's simulated GPU.
 *
 *   y = (x @ W^T + b) @ W2          output 0, [M, P]   (addmm_out, then mm_out)
 *   z = the same through bmm_out    output 1, [1, M, P]
 *   b itself                        output 2, [N]      (a constant: not the caller's memory)
 *
 * x is [M, K] float32 (M from the input). With FAKE_RAW_WEIGHTS the constants live in one
 * blob from aoti_torch_cuda_caching_allocator_raw_alloc (weight_use_caching_allocator);
 * without, each is an empty_strided tensor filled by copy_ from host memory. With
 * FAKE_MISSING_SHIM it also imports a shim vram does not have.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void *H; /* AtenTensorHandle */
typedef int32_t E;

E aoti_torch_empty_strided(int64_t, const int64_t *, const int64_t *, int32_t, int32_t, int32_t,
                           H *);
E aoti_torch_create_tensor_from_blob_v2(void *, int64_t, const int64_t *, const int64_t *,
                                        int64_t, int32_t, int32_t, int32_t, H *, int32_t,
                                        const uint8_t *, int64_t);
E aoti_torch__reinterpret_tensor(H, int64_t, const int64_t *, const int64_t *, int64_t, H *);
E aoti_torch_new_tensor_handle(H, H *);
E aoti_torch_delete_tensor_object(H);
E aoti_torch_copy_(H, H, int32_t);
E aoti_torch_get_sizes(H, int64_t **);
E aoti_torch_get_dim(H, int64_t *);
E aoti_torch_get_dtype(H, int32_t *);
E aoti_torch_cuda_addmm_out(H, H, H, H, double, double);
E aoti_torch_cuda_mm_out(H, H, H);
E aoti_torch_cuda_bmm_out(H, H, H);
E aoti_torch_create_cuda_guard(int32_t, void **);
E aoti_torch_delete_cuda_guard(void *);
E aoti_torch_create_cuda_stream_guard(void *, int32_t, void **);
E aoti_torch_delete_cuda_stream_guard(void *);
E aoti_torch_get_current_cuda_stream(int32_t, void **);
E aoti_torch_cuda_caching_allocator_raw_alloc(uint64_t, void **);
E aoti_torch_cuda_caching_allocator_raw_delete(void *);
int32_t aoti_torch_dtype_float32(void);
int32_t aoti_torch_device_type_cpu(void);
int32_t aoti_torch_device_type_cuda(void);
void aoti_torch_grad_mode_set_enabled(bool);
#ifdef FAKE_MISSING_SHIM
E aoti_torch_cuda__fake_op_out(H);
#endif

#define K 8
#define N 6
#define P 4
#define CONSTANTS 3

static const char *names[CONSTANTS] = {"fc_weight", "fc_bias", "proj_weight"};
static const char *fqns[CONSTANTS] = {"fc.weight", "fc.bias", "proj.weight"};
static const int64_t numel[CONSTANTS] = {N * K, N, N * P};
static const int64_t ndims[CONSTANTS] = {2, 1, 2};
static const int64_t shapes[CONSTANTS][2] = {{N, K}, {N, 1}, {N, P}};
static const int64_t strides_of[CONSTANTS][2] = {{K, 1}, {1, 1}, {P, 1}};

static _Thread_local char last_error[256];

typedef struct {
    int32_t device;
    H constants[CONSTANTS]; /* W [N, K], b [N], W2 [N, P] */
    void *blob;             /* FAKE_RAW_WEIGHTS: the constants' one allocation */
} container;

static float weight(int c, int64_t i) {
    if (c == 0) {
        return (float)(((i / K) * 7 + (i % K) * 3) % 11 - 5) / 8.0f;
    }
    if (c == 1) {
        return (float)(i % 5 - 2) / 4.0f;
    }
    return (float)((i / P + 2 * (i % P)) % 7 - 3) / 4.0f;
}

static int32_t fail(const char *message) {
    snprintf(last_error, sizeof last_error, "fake model: %s", message);
    return 1;
}

int32_t AOTInductorGetLastError(const char **message) {
    *message = last_error;
    return 0;
}

/* Make constant c on the device and fill it from host memory. */
static int32_t make_constant(container *box, int c, char *blob_at) {
    int32_t f32 = aoti_torch_dtype_float32();
    int64_t size = numel[c];
    int64_t stride = 1;
    float host[N * K];
    for (int64_t i = 0; i < size; i++) {
        host[i] = weight(c, i);
    }
    H source = NULL;
    if (aoti_torch_create_tensor_from_blob_v2(host, 1, &size, &stride, 0, f32,
                                              aoti_torch_device_type_cpu(), 0, &source, 0, NULL,
                                              0)) {
        return 1;
    }
    E made;
    if (blob_at != NULL) {
        made = aoti_torch_create_tensor_from_blob_v2(
            blob_at, ndims[c], shapes[c], strides_of[c], 0, f32, aoti_torch_device_type_cuda(),
            box->device, &box->constants[c], 0, NULL, 0);
    } else {
        made = aoti_torch_empty_strided(ndims[c], shapes[c], strides_of[c], f32,
                                        aoti_torch_device_type_cuda(), box->device,
                                        &box->constants[c]);
    }
    /* the host values are flat: copy through a flat view of the constant */
    H flat = NULL;
    E copied = made || aoti_torch__reinterpret_tensor(box->constants[c], 1, &size, &stride, 0,
                                                      &flat) ||
               aoti_torch_copy_(flat, source, 0);
    if (flat != NULL) {
        aoti_torch_delete_tensor_object(flat);
    }
    aoti_torch_delete_tensor_object(source);
    return made || copied;
}

int32_t AOTInductorModelContainerCreateWithDevice(void **handle, size_t num_models,
                                                  const char *device, const char *cubin_dir) {
    (void)num_models;
    (void)cubin_dir;
    container *box = calloc(1, sizeof(container));
    if (box == NULL || strncmp(device, "cuda", 4) != 0) {
        free(box);
        return fail("expected a cuda device");
    }
    box->device = device[4] == ':' ? atoi(device + 5) : 0;
    char *blob = NULL;
#ifdef FAKE_RAW_WEIGHTS
    if (aoti_torch_cuda_caching_allocator_raw_alloc((N * K + N + N * P) * 4, &box->blob)) {
        free(box);
        return fail("raw_alloc failed");
    }
    blob = box->blob;
#endif
    for (int c = 0; c < CONSTANTS; c++) {
        if (make_constant(box, c, blob)) {
            return fail("making a constant failed");
        }
        if (blob != NULL) {
            blob += numel[c] * 4;
        }
    }
    *handle = box;
    return 0;
}

int32_t AOTInductorModelContainerDelete(void *handle) {
    container *box = handle;
    for (int c = 0; c < CONSTANTS; c++) {
        if (box->constants[c] != NULL) {
            aoti_torch_delete_tensor_object(box->constants[c]);
        }
    }
    aoti_torch_cuda_caching_allocator_raw_delete(box->blob);
    free(box);
    return 0;
}

int32_t AOTInductorModelContainerGetNumInputs(void *handle, size_t *n) {
    (void)handle;
    *n = 1;
    return 0;
}

int32_t AOTInductorModelContainerGetNumOutputs(void *handle, size_t *n) {
    (void)handle;
    *n = 3;
    return 0;
}

int32_t AOTInductorModelContainerGetNumConstants(void *handle, size_t *n) {
    (void)handle;
    *n = CONSTANTS;
    return 0;
}

int32_t AOTInductorModelContainerGetConstantName(void *handle, size_t i, const char **name) {
    (void)handle;
    *name = names[i];
    return 0;
}

int32_t AOTInductorModelContainerGetConstantOriginalFQN(void *handle, size_t i,
                                                        const char **fqn) {
    (void)handle;
    *fqn = fqns[i];
    return 0;
}

int32_t AOTInductorModelContainerGetConstantDataSize(void *handle, size_t i, size_t *size) {
    (void)handle;
    *size = (size_t)numel[i] * 4;
    return 0;
}

static int32_t run(container *box, H x, H *outputs, void *stream) {
    void *device_guard = NULL, *stream_guard = NULL, *current = NULL;
    H w_t = NULL, y0 = NULL, y = NULL, y0_3d = NULL, w2_3d = NULL, z = NULL;
    int32_t f32 = aoti_torch_dtype_float32(), cuda = aoti_torch_device_type_cuda();
    int32_t error = 1, dtype = -1;
    int64_t dim = 0, *sizes = NULL;
    aoti_torch_grad_mode_set_enabled(false);
    if (aoti_torch_create_cuda_guard(box->device, &device_guard) ||
        aoti_torch_create_cuda_stream_guard(stream, box->device, &stream_guard) ||
        aoti_torch_get_current_cuda_stream(box->device, &current)) {
        goto done;
    }
    if (current != stream) {
        fail("the current stream is not the one the run was given");
        goto done;
    }
    if (aoti_torch_get_dtype(x, &dtype) || aoti_torch_get_dim(x, &dim) ||
        aoti_torch_get_sizes(x, &sizes)) {
        goto done;
    }
    if (dtype != f32 || dim != 2 || sizes[1] != K) {
        fail("the input must be a float32 [M, 8] tensor");
        goto done;
    }
    int64_t m = sizes[0];
    int64_t w_t_sizes[2] = {K, N}, w_t_strides[2] = {1, K};
    int64_t y0_sizes[2] = {m, N}, y0_strides[2] = {N, 1};
    int64_t y_sizes[2] = {m, P}, y_strides[2] = {P, 1};
    int64_t a3_sizes[3] = {1, m, N}, a3_strides[3] = {m * N, N, 1};
    int64_t b3_sizes[3] = {1, N, P}, b3_strides[3] = {N * P, P, 1};
    int64_t z_sizes[3] = {1, m, P}, z_strides[3] = {m * P, P, 1};
#ifdef FAKE_MISSING_SHIM
    aoti_torch_cuda__fake_op_out(x);
#endif
    if (aoti_torch__reinterpret_tensor(box->constants[0], 2, w_t_sizes, w_t_strides, 0, &w_t) ||
        aoti_torch_empty_strided(2, y0_sizes, y0_strides, f32, cuda, box->device, &y0) ||
        aoti_torch_cuda_addmm_out(y0, box->constants[1], x, w_t, 1.0, 1.0) ||
        aoti_torch_empty_strided(2, y_sizes, y_strides, f32, cuda, box->device, &y) ||
        aoti_torch_cuda_mm_out(y, y0, box->constants[2])) {
        goto done;
    }
    if (aoti_torch__reinterpret_tensor(y0, 3, a3_sizes, a3_strides, 0, &y0_3d) ||
        aoti_torch__reinterpret_tensor(box->constants[2], 3, b3_sizes, b3_strides, 0, &w2_3d) ||
        aoti_torch_empty_strided(3, z_sizes, z_strides, f32, cuda, box->device, &z) ||
        aoti_torch_cuda_bmm_out(z, y0_3d, w2_3d) ||
        aoti_torch_new_tensor_handle(box->constants[1], &outputs[2])) {
        goto done;
    }
    outputs[0] = y;
    outputs[1] = z;
    y = z = NULL;
    error = 0;
done:
    H owned[] = {x, w_t, y0, y, y0_3d, w2_3d, z};
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) {
        if (owned[i] != NULL) {
            aoti_torch_delete_tensor_object(owned[i]);
        }
    }
    if (stream_guard != NULL) {
        aoti_torch_delete_cuda_stream_guard(stream_guard);
    }
    if (device_guard != NULL) {
        aoti_torch_delete_cuda_guard(device_guard);
    }
    aoti_torch_grad_mode_set_enabled(true);
    if (error && last_error[0] == '\0') {
        fail("a shim failed");
    }
    return error;
}

int32_t AOTInductorModelContainerRunSingleThreaded(void *handle, H *inputs, size_t num_inputs,
                                                   H *outputs, size_t num_outputs, void *stream,
                                                   void *proxy) {
    (void)proxy;
    last_error[0] = '\0';
    if (num_inputs != 1 || num_outputs != 3) {
        return fail("expected 1 input and 3 outputs");
    }
    return run(handle, inputs[0], outputs, stream);
}
