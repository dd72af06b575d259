/* SPDX-License-Identifier: MIT */
/*
** track.c -- the table of live allocations of the preload library
** (track.h): chained buckets keyed by (kind, key), doubled as the table
** fills, so that a free never scans. Every function named _locked is
** called with the table's lock held and returns with it held.
*/
#include <assert.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "preload/track.h"

/* Live allocations by key: chained buckets, doubled when N passes
** N_BUCKET, so that a free never scans. */
struct track_table {
    struct track **bucket; /* N_BUCKET chains (a power of two), or NULL */
    size_t n_bucket;
    size_t n;
    struct track *spare; /* entries taken out, kept for the next put */
    size_t n_spare;
};

/* Spare entries kept (48 bytes each). A put takes a spare instead of
** calling malloc: after a driver call has walked the caches, malloc's
** bins cost about seven cache misses, a spare one or two (cachegrind of
** tests/preload/hook_cost with FAKECUDA_EVICT). */
#define TRACK_SPARES 1024

static struct {
    pthread_mutex_t lock; /* guards table and owner */
    pthread_t owner;      /* holder of lock, for asserts */
    struct track_table table;
} T = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void
table_lock(void)
{
    pthread_mutex_lock(&T.lock);
    T.owner = pthread_self();
}

static void
table_unlock(void)
{
    pthread_mutex_unlock(&T.lock);
}

static size_t
track_hash(int kind, uint64_t key, size_t n_bucket)
{
    uint64_t h = (key ^ ((uint64_t)kind << 61)) * 0x9e3779b97f4a7c15ULL; /* Fibonacci */
    return (size_t)(h >> 32) & (n_bucket - 1);
}

/* Double the buckets (or make the first 1024). False: out of host memory,
** the table stays as it was. Caller holds the lock. */
static bool
table_grow_locked(struct track_table *t)
{
    assert(pthread_equal(T.owner, pthread_self()));
    size_t n = t->n_bucket == 0 ? 1024 : t->n_bucket * 2;
    struct track **b = calloc(n, sizeof *b);
    if (b == NULL)
        return false;
    for (size_t i = 0; i < t->n_bucket; i++) {
        struct track *e = t->bucket[i];
        while (e != NULL) {
            struct track *next = e->next;
            size_t k = track_hash(e->kind, e->key, n);
            e->next = b[k];
            b[k] = e;
            e = next;
        }
    }
    free(t->bucket);
    t->bucket = b;
    t->n_bucket = n;
    return true;
}

/* The entry of (KIND, KEY), or NULL. Caller holds the lock. */
static struct track *
table_find_locked(struct track_table *t, int kind, uint64_t key)
{
    assert(pthread_equal(T.owner, pthread_self()));
    if (t->n_bucket == 0)
        return NULL;
    for (struct track *e = t->bucket[track_hash(kind, key, t->n_bucket)]; e != NULL;
         e = e->next)
        if (e->key == key && e->kind == kind)
            return e;
    return NULL;
}

/* Add a copy of *E. False: out of host memory. Caller holds the lock. */
static bool
table_put_locked(struct track_table *t, const struct track *e)
{
    assert(pthread_equal(T.owner, pthread_self()));
    if (t->n >= t->n_bucket && !table_grow_locked(t) && t->n_bucket == 0)
        return false; /* a longer chain is fine; no chain at all is not */
    struct track *c = t->spare;
    if (c != NULL) {
        t->spare = c->next;
        t->n_spare--;
    } else if ((c = malloc(sizeof *c)) == NULL) {
        return false;
    }
    *c = *e;
    size_t k = track_hash(e->kind, e->key, t->n_bucket);
    c->next = t->bucket[k];
    t->bucket[k] = c;
    t->n++;
    return true;
}

/* Remove (KIND, KEY) into *OUT. False if it is not there. Caller holds
** the lock. */
static bool
table_take_locked(struct track_table *t, int kind, uint64_t key, struct track *out)
{
    assert(pthread_equal(T.owner, pthread_self()));
    if (t->n_bucket == 0)
        return false;
    struct track **pp = &t->bucket[track_hash(kind, key, t->n_bucket)];
    for (; *pp != NULL; pp = &(*pp)->next) {
        struct track *e = *pp;
        if (e->key == key && e->kind == kind) {
            *pp = e->next;
            *out = *e;
            out->next = NULL;
            if (t->n_spare < TRACK_SPARES) {
                e->next = t->spare;
                t->spare = e;
                t->n_spare++;
            } else {
                free(e);
            }
            t->n--;
            return true;
        }
    }
    return false;
}

/* Forget every entry (a forked child's table holds its parent's). Caller
** holds the lock. */
static void
table_clear_locked(struct track_table *t)
{
    assert(pthread_equal(T.owner, pthread_self()));
    for (size_t i = 0; i < t->n_bucket; i++) {
        struct track *e = t->bucket[i];
        while (e != NULL) {
            struct track *next = e->next;
            free(e);
            e = next;
        }
        t->bucket[i] = NULL;
    }
    t->n = 0;
    /* The spares were the parent's entries: also this process's memory,
    ** kept for its own puts. */
}

bool
track_put(int kind, uint64_t key, int dev, uint64_t bytes, uint64_t trace_id)
{
    struct track e = {.key = key,
                      .bytes = bytes,
                      .kind = kind,
                      .dev = dev,
                      .refs = 1,
                      .trace_id = trace_id};
    table_lock();
    bool ok = table_put_locked(&T.table, &e);
    table_unlock();
    return ok;
}

bool
track_take(int kind, uint64_t key, struct track *out)
{
    table_lock();
    bool ok = table_take_locked(&T.table, kind, key, out);
    table_unlock();
    return ok;
}

enum track_unref
track_unref(uint64_t handle, struct track *out)
{
    enum track_unref u = TRACK_UNKNOWN;
    table_lock();
    struct track *t = table_find_locked(&T.table, TRACK_HANDLE, handle);
    if (t != NULL && t->refs > 1) {
        t->refs--;
        u = TRACK_STILL_HELD;
    } else if (t != NULL && table_take_locked(&T.table, TRACK_HANDLE, handle, out)) {
        u = TRACK_LAST;
    }
    table_unlock();
    return u;
}

void
track_ref(uint64_t handle)
{
    table_lock();
    struct track *t = table_find_locked(&T.table, TRACK_HANDLE, handle);
    if (t != NULL)
        t->refs++;
    table_unlock();
}

void
track_fork_prepare(void)
{
    table_lock();
}

void
track_fork_parent(void)
{
    table_unlock();
}

void
track_fork_child(void)
{
    pthread_mutex_init(&T.lock, NULL);
    table_lock();
    table_clear_locked(&T.table);
    table_unlock();
}
