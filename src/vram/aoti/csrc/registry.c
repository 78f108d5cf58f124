/* The registry of live objects: the addresses this library handed out (tensors, guards,
 * streams), each with its kind. Every shim looks a handle up here before it reads it, so a
 * NULL, freed or foreign pointer is an error, never a dereference.
 *
 * An open-addressing hash set under one mutex; nothing that calls back into vram runs
 * while the mutex is held.
 */
#include <pthread.h>
#include <stdlib.h>

#include "vram_aoti.h"

#define EMPTY ((uintptr_t)0)
#define REMOVED ((uintptr_t)1)
#define MIN_CAPACITY 256
#define KINDS 5

typedef struct {
    uintptr_t key;
    int32_t kind;
} slot;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static slot *slots;     /* guarded by lock */
static size_t capacity; /* a power of two; guarded by lock */
static size_t used;     /* slots holding a key or REMOVED; guarded by lock */
static int64_t live[KINDS]; /* live objects per kind; guarded by lock */

static size_t slot_index(uintptr_t key) {
    return (size_t)((key >> 4) * 0x9E3779B97F4A7C15ull) & (capacity - 1);
}

static slot *find(uintptr_t key) {
    if (capacity == 0) {
        return NULL;
    }
    for (size_t i = slot_index(key);; i = (i + 1) & (capacity - 1)) {
        if (slots[i].key == key) {
            return &slots[i];
        }
        if (slots[i].key == EMPTY) {
            return NULL;
        }
    }
}

/* A table of twice the live objects (at least MIN_CAPACITY), without removed slots. */
static bool rebuild(void) {
    size_t count = 0;
    for (int k = 0; k < KINDS; k++) {
        count += (size_t)live[k];
    }
    size_t wanted = MIN_CAPACITY;
    while (wanted < 4 * (count + 1)) {
        wanted *= 2;
    }
    slot *fresh = calloc(wanted, sizeof(slot));
    if (fresh == NULL) {
        return false;
    }
    slot *old = slots;
    size_t old_capacity = capacity;
    slots = fresh;
    capacity = wanted;
    used = 0;
    for (size_t i = 0; i < old_capacity; i++) {
        if (old[i].key != EMPTY && old[i].key != REMOVED) {
            size_t j = slot_index(old[i].key);
            while (slots[j].key != EMPTY) {
                j = (j + 1) & (capacity - 1);
            }
            slots[j] = old[i];
            used++;
        }
    }
    free(old);
    return true;
}

bool vram_register(void *object, int32_t kind) {
    pthread_mutex_lock(&lock);
    bool ok = (used + 1) * 2 <= capacity || rebuild();
    if (ok) {
        size_t i = slot_index((uintptr_t)object);
        while (slots[i].key != EMPTY && slots[i].key != REMOVED) {
            i = (i + 1) & (capacity - 1);
        }
        if (slots[i].key == EMPTY) {
            used++;
        }
        slots[i].key = (uintptr_t)object;
        slots[i].kind = kind;
        live[kind]++;
    }
    pthread_mutex_unlock(&lock);
    return ok;
}

bool vram_unregister(void *object, int32_t kind) {
    pthread_mutex_lock(&lock);
    slot *found = find((uintptr_t)object);
    bool ok = found != NULL && found->kind == kind;
    if (ok) {
        found->key = REMOVED;
        live[kind]--;
    }
    pthread_mutex_unlock(&lock);
    return ok;
}

bool vram_is_live(const void *object, int32_t kind) {
    pthread_mutex_lock(&lock);
    slot *found = find((uintptr_t)object);
    bool ok = found != NULL && found->kind == kind;
    pthread_mutex_unlock(&lock);
    return ok;
}

VRAM_EXPORT int64_t vram_aoti_live_objects(int32_t kind) {
    if (kind < 1 || kind >= KINDS) {
        return -1;
    }
    pthread_mutex_lock(&lock);
    int64_t count = live[kind];
    pthread_mutex_unlock(&lock);
    return count;
}
