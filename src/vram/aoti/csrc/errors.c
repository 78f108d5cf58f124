/* Errors, checks and warnings; the calls into a model's interface.
 *
 * Every failing shim leaves one message per thread (vram_aoti_last_error) and returns
 * AOTI_TORCH_FAILURE; the model turns that code into an exception and its interface
 * function into AOTI_RUNTIME_FAILURE, and vram.aoti raises the message.
 *
 * Note [aoti_torch_check]: PyTorch's aoti_torch_check throws (TORCH_CHECK) and the code a
 * model generates around it relies on that: it does not test a result. While a model's
 * interface function runs (it was entered through vram_aoti_run and its kin, and it
 * catches every exception itself), a failed check here throws too, a C++ exception made
 * with the C++ runtime the model already loaded. Anywhere else (a test calling the symbol
 * directly) it records the message and returns.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "vram_aoti.h"

#define MESSAGE_BYTES 1024

static _Thread_local char last_error[MESSAGE_BYTES];
static _Thread_local int model_calls; /* interface functions of a model on this stack */

vram_callbacks vram_cb;

AOTITorchError vram_fail(const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(last_error, sizeof last_error, format, args);
    va_end(args);
    return AOTI_TORCH_FAILURE;
}

bool vram_in_model_call(void) {
    return model_calls > 0;
}

VRAM_EXPORT const char *vram_aoti_last_error(void) {
    return last_error;
}

VRAM_EXPORT void vram_aoti_clear_error(void) {
    last_error[0] = '\0';
}

VRAM_EXPORT void vram_aoti_set_error(const char *message) {
    snprintf(last_error, sizeof last_error, "%s", message ? message : "unknown error");
}

/* The layout of vram_callbacks and vram_tensor_desc; vram.aoti checks it on load. */
VRAM_EXPORT int32_t vram_aoti_abi_version(void) {
    return 1;
}

VRAM_EXPORT void vram_aoti_set_callbacks(const vram_callbacks *callbacks) {
    vram_cb = *callbacks;
}

/* ---- a model's interface functions, entered with the check rule above in force ------- */
typedef int32_t (*run_fn)(void *, void **, size_t, void **, size_t, void *, void *);
typedef int32_t (*create_fn)(void **, size_t, const char *, const char *);
typedef int32_t (*update_fn)(void *, const uint8_t *);
typedef int32_t (*delete_fn)(void *);

VRAM_EXPORT int32_t vram_aoti_run(void *fn, void *container, void **inputs, size_t num_inputs,
                                  void **outputs, size_t num_outputs, void *stream) {
    last_error[0] = '\0';
    model_calls++;
    int32_t result =
        ((run_fn)fn)(container, inputs, num_inputs, outputs, num_outputs, stream, NULL);
    model_calls--;
    return result;
}

VRAM_EXPORT int32_t vram_aoti_create(void *fn, void **container, size_t num_models,
                                     const char *device, const char *cubin_dir) {
    last_error[0] = '\0';
    model_calls++;
    int32_t result = ((create_fn)fn)(container, num_models, device, cubin_dir);
    model_calls--;
    return result;
}

VRAM_EXPORT int32_t vram_aoti_update_constants(void *fn, void *container, const uint8_t *blob) {
    last_error[0] = '\0';
    model_calls++;
    int32_t result = ((update_fn)fn)(container, blob);
    model_calls--;
    return result;
}

VRAM_EXPORT int32_t vram_aoti_delete(void *fn, void *container) {
    model_calls++;
    int32_t result = ((delete_fn)fn)(container);
    model_calls--;
    return result;
}

/* ---- checks and warnings --------------------------------------------------------------- */
typedef void *(*cxa_allocate_fn)(size_t);
typedef void (*cxa_throw_fn)(void *, void *, void (*)(void *));

/* Throw an int as a C++ exception (Note [aoti_torch_check]); returns when no C++ runtime
 * is loaded. */
static void throw_into_model(void) {
    void *runtime = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_NOLOAD);
    if (runtime == NULL) {
        return;
    }
    cxa_allocate_fn allocate = (cxa_allocate_fn)dlsym(runtime, "__cxa_allocate_exception");
    cxa_throw_fn throw_exception = (cxa_throw_fn)dlsym(runtime, "__cxa_throw");
    void *int_type = dlsym(runtime, "_ZTIi"); /* typeinfo for int */
    dlclose(runtime); /* the model keeps it loaded */
    if (allocate == NULL || throw_exception == NULL || int_type == NULL) {
        return;
    }
    int *payload = allocate(sizeof(int));
    *payload = AOTI_TORCH_FAILURE;
    throw_exception(payload, int_type, NULL);
}

VRAM_EXPORT void aoti_torch_check(bool cond, const char *func, const char *file, uint32_t line,
                                  const char *msg) {
    if (cond) {
        return;
    }
    vram_fail("check failed in %s (%s:%u): %s", func ? func : "?", file ? file : "?", line,
              msg ? msg : "");
    if (vram_in_model_call()) {
        throw_into_model();
    }
}

VRAM_EXPORT void aoti_torch_warn(const char *func, const char *file, uint32_t line,
                                 const char *msg) {
    char text[MESSAGE_BYTES];
    snprintf(text, sizeof text, "%s (%s:%u): %s", func ? func : "?", file ? file : "?", line,
             msg ? msg : "");
    if (vram_cb.warn != NULL) {
        vram_cb.warn(text);
    } else {
        fprintf(stderr, "vram.aoti warning: %s\n", text);
    }
}
