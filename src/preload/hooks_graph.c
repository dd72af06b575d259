/* SPDX-License-Identifier: MIT */
/*
** hooks_graph.c -- the accounting of CUDA graphs' memory: their
** allocation nodes, made explicitly (cuGraphAddMemAllocNode, cuGraphAddNode)
** or by capturing cuMemAllocAsync (the steps of the rows of
** PRELOAD_HOOKS_GRAPH in hooks.h; preload.h).
**
** Measured on an H100 (driver 580; tests/gpu/probe_rounding.c): nothing
** is held at instantiation; at the first launch (or upload) the device's
** graph pool maps the allocations' memory in chunks of 32 MiB
** (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, which NVML's per-process
** figure follows) and keeps it after the free node, cuGraphExecDestroy
** and cuGraphDestroy, until cuDeviceGraphMemTrim. So:
**   - instantiation walks the graph (child graphs included) and keeps,
**     for the executable graph, what its allocation nodes may need: the
**     sum of their sizes in 2 MiB units, rounded up to a chunk, and the
**     devices they are on (a TRACK_EXEC entry); an instantiation that
**     uploads (CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) is charged as a launch;
**   - a launch or an upload of a graph with allocation nodes charges that
**     ahead on each of its devices' graph pool (preload.h's
**     charged_pool), and settles the pool after the call (its reserve
**     read and charged exactly), so a graph that does not fit is refused
**     with CUDA_ERROR_OUT_OF_MEMORY before the driver maps anything;
**   - cuDeviceGraphMemTrim settles the device's graph pool.
** A graph instantiated through a call that is not hooked (the CUDA 10
** cuGraphInstantiate) is launched uncharged, and its pool settled after
** the launch: the growth is charged then. Memory nodes cannot be changed
** by cuGraphExecUpdate, so the bound taken at instantiation stands;
** allocation nodes inside conditional nodes' bodies are not walked.
*/
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "driver/cuda_api.h"
#include "preload/hooks.h"
#include "preload/preload.h"
#include "preload/track.h"

#define GRAPH_CHUNK (32ULL << 20) /* the graph pool's growth unit, measured */
#define GRAPH_GRANULE (2ULL << 20)
#define GRAPH_DEPTH 8 /* child graphs followed this deep */

/* cuDeviceGraphMemTrim calls so far (atomic): a graph that mapped its
** memory before the last one may have to map it again. */
static unsigned trims;

/* The driver's function NAME into *FP (SIZE bytes). */
static bool
driver_sym(const char *name, void *fp, size_t size)
{
    void *p = interpose_lib_sym(HOOK_CUDA, name);
    if (p == NULL)
        return false;
    memcpy(fp, &p, size);
    return true;
}

/* What the allocation nodes of GRAPH (and of its child graphs) ask for,
** bytes in 2 MiB units; the ordinals they are on into *MASK. */
static uint64_t
graph_nodes_bytes(vcu_graph graph, uint64_t *mask, int depth)
{
    vcu_pfn_cuGraphGetNodes get_nodes;
    vcu_pfn_cuGraphNodeGetType get_type;
    vcu_pfn_cuGraphMemAllocNodeGetParams get_params;
    vcu_pfn_cuGraphChildGraphNodeGetGraph get_child = NULL;
    size_t n = 0;
    if (depth > GRAPH_DEPTH ||
        !driver_sym("cuGraphGetNodes", &get_nodes, sizeof get_nodes) ||
        !driver_sym("cuGraphNodeGetType", &get_type, sizeof get_type) ||
        !driver_sym("cuGraphMemAllocNodeGetParams", &get_params, sizeof get_params) ||
        get_nodes(graph, NULL, &n) != VCU_SUCCESS || n == 0)
        return 0;
    bool child_ok =
        driver_sym("cuGraphChildGraphNodeGetGraph", &get_child, sizeof get_child);
    vcu_graph_node *nodes = malloc(n * sizeof *nodes);
    if (nodes == NULL || get_nodes(graph, nodes, &n) != VCU_SUCCESS) {
        free(nodes);
        return 0;
    }
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        vcu_graph_node_type type;
        if (get_type(nodes[i], &type) != VCU_SUCCESS)
            continue;
        vcu_mem_alloc_node_params p;
        vcu_graph child;
        if (type == VCU_GRAPH_NODE_TYPE_MEM_ALLOC &&
            get_params(nodes[i], &p) == VCU_SUCCESS &&
            p.poolProps.location.type == VCU_MEM_LOCATION_TYPE_DEVICE &&
            p.poolProps.location.id >= 0 &&
            p.poolProps.location.id < PRELOAD_MAX_DEVICES) {
            uint64_t b = (p.bytesize + GRAPH_GRANULE - 1) / GRAPH_GRANULE * GRAPH_GRANULE;
            bytes = bytes + b < bytes ? UINT64_MAX : bytes + b;
            *mask |= 1ULL << p.poolProps.location.id;
        } else if (type == VCU_GRAPH_NODE_TYPE_GRAPH && child_ok &&
                   get_child(nodes[i], &child) == VCU_SUCCESS) {
            uint64_t b = graph_nodes_bytes(child, mask, depth + 1);
            bytes = bytes + b < bytes ? UINT64_MAX : bytes + b;
        }
    }
    free(nodes);
    return bytes;
}

/* What launching GRAPH may map: its nodes' bytes rounded up to a chunk. */
static uint64_t
graph_bound(vcu_graph graph, uint64_t *mask)
{
    *mask = 0;
    uint64_t b = graph_nodes_bytes(graph, mask, 0);
    uint64_t r = (b + GRAPH_CHUNK - 1) / GRAPH_CHUNK * GRAPH_CHUNK;
    return r < b ? UINT64_MAX : r;
}

/* The driver's reserve of ordinal WHAT's (an int) graph pool. */
static bool
graph_read(const void *what, uint64_t *reserve)
{
    vcu_pfn_cuDeviceGetGraphMemAttribute get;
    vcu_uint64 v = 0;
    if (!driver_sym("cuDeviceGetGraphMemAttribute", &get, sizeof get) ||
        get(*(const int *)what, VCU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &v) !=
            VCU_SUCCESS)
        return false;
    *reserve = v;
    return true;
}

bool
graph_pool_settle(int ord)
{
    struct preload_device *d = NULL;
    if (ord < 0 || ord >= PRELOAD_MAX_DEVICES || device_get(ord, &d) != VCU_SUCCESS)
        return false;
    return cpool_settle(&d->graph, graph_read, &ord);
}

/*
** BOUND charged ahead in the graph pool of every ordinal of MASK (C->mask
** then says which were charged). False, with what was charged given back,
** when one is refused.
*/
static bool
graph_ahead(struct hook_call *c, uint64_t mask, uint64_t bound)
{
    c->mask = 0;
    c->asked = bound;
    for (int ord = 0; ord < PRELOAD_MAX_DEVICES && bound > 0; ord++) {
        struct preload_device *d = NULL;
        if (!(mask & (1ULL << ord)) || device_get(ord, &d) != VCU_SUCCESS)
            continue;
        struct hook_call one = *c;
        if (!cpool_ahead(&one, &d->graph, bound, NULL, NULL)) {
            c->r = one.r;
            for (int k = 0; k < ord; k++)
                if (c->mask & (1ULL << k))
                    cpool_done(&P.dev[k].graph, &P.dev[k], bound, false);
            c->mask = 0;
            return false;
        }
        c->mask |= 1ULL << ord;
    }
    c->bytes = bound;
    return true;
}

/* After the call that may have mapped the charges ahead of C: each
** becomes the pool's, settled; or is given back when the call failed. */
static void
graph_after(struct hook_call *c)
{
    for (int ord = 0; ord < PRELOAD_MAX_DEVICES && c->mask != 0; ord++) {
        if (!(c->mask & (1ULL << ord)))
            continue;
        cpool_done(&P.dev[ord].graph, &P.dev[ord], c->bytes, c->r == VCU_SUCCESS);
        (void)graph_pool_settle(ord);
    }
}

/* ------------------------------------------------------------------ */
/* Instantiation                                                        */
/* ------------------------------------------------------------------ */

/* The bound of GRAPH into C (asked, mask), charged ahead when UPLOAD. */
static bool
instantiating(struct hook_call *c, vcu_graph graph, bool upload)
{
    uint64_t mask = 0, bound = graph != NULL ? graph_bound(graph, &mask) : 0;
    c->asked = bound;
    c->ord = -1;
    if (upload && bound > 0)
        return graph_ahead(c, mask, bound);
    c->mask = mask;
    c->bytes = 0; /* nothing charged ahead: C->mask only says where */
    return true;
}

/* The executable graph *EXEC remembers its bound (even 0: a graph that
** is not in the table at launch was made by a call that is not hooked). */
static vcu_result
instantiated(struct hook_call *c, vcu_graph_exec *exec)
{
    uint64_t mask = c->mask;
    unsigned epoch = __atomic_load_n(&trims, __ATOMIC_ACQUIRE) + 1;
    bool uploaded = c->bytes > 0;
    if (uploaded)
        graph_after(c);
    uint64_t key = exec != NULL ? (uint64_t)(uintptr_t)*exec : 0;
    if (c->r == VCU_SUCCESS && key != 0 && track_put(TRACK_EXEC, key, -1, c->asked, mask))
        (void)track_set_refs(TRACK_EXEC, key, uploaded ? epoch : 0);
    return c->r;
}

static bool
instantiate_flags_reserve(struct hook_call *c, vcu_graph_exec *phGraphExec,
                          vcu_graph hGraph, unsigned long long flags)
{
    (void)phGraphExec;
    return instantiating(c, hGraph, (flags & VCU_GRAPH_INSTANTIATE_FLAG_UPLOAD) != 0);
}

static bool
instantiate_params_reserve(struct hook_call *c, vcu_graph_exec *phGraphExec,
                           vcu_graph hGraph, vcu_graph_instantiate_params *params)
{
    (void)phGraphExec;
    return instantiating(
        c, hGraph, params != NULL && (params->flags & VCU_GRAPH_INSTANTIATE_FLAG_UPLOAD));
}

static bool
instantiate_v2_reserve(struct hook_call *c, vcu_graph_exec *phGraphExec, vcu_graph hGraph,
                       ...)
{
    (void)phGraphExec;
    return instantiating(c, hGraph, false);
}

static vcu_result
instantiate_granted(struct hook_call *c, vcu_graph_exec *phGraphExec, ...)
{
    return instantiated(c, phGraphExec);
}

/* ------------------------------------------------------------------ */
/* Launch and upload                                                    */
/* ------------------------------------------------------------------ */

/*
** A graph with allocation nodes is charged ahead what they may map, the
** first time (its memory then stays in the pool, its own until a trim:
** the next launches reuse it, and settle the pool after the call, which
** charges any growth all the same). One the table does not know has its
** pool settled after the call.
*/
static bool
launch_reserve(struct hook_call *c, vcu_graph_exec exec, vcu_stream stream)
{
    (void)stream;
    struct track e;
    memset(&c->e, 0, sizeof c->e);
    c->asked = UINT64_MAX; /* not known: settle after */
    if (!track_find(TRACK_EXEC, (uint64_t)(uintptr_t)exec, &e))
        return true;
    if (e.bytes == 0) {
        c->asked = 0;
        return true;
    }
    c->e = e;
    if (e.refs == __atomic_load_n(&trims, __ATOMIC_ACQUIRE) + 1)
        return true; /* mapped already */
    return graph_ahead(c, e.trace_id, e.bytes);
}

static vcu_result
launch_granted(struct hook_call *c, vcu_graph_exec exec, vcu_stream stream)
{
    (void)stream;
    if (c->mask != 0) {
        unsigned epoch = __atomic_load_n(&trims, __ATOMIC_ACQUIRE) + 1;
        graph_after(c);
        if (c->r == VCU_SUCCESS)
            (void)track_set_refs(TRACK_EXEC, (uint64_t)(uintptr_t)exec, epoch);
    } else if (c->asked == UINT64_MAX && c->r == VCU_SUCCESS) {
        uint64_t mask = c->e.trace_id;
        int ord;
        if (c->e.kind != TRACK_EXEC && current_device(&ord) == VCU_SUCCESS)
            mask = 1ULL << ord;
        for (ord = 0; ord < PRELOAD_MAX_DEVICES && mask != 0; ord++)
            if (mask & (1ULL << ord))
                (void)graph_pool_settle(ord);
    }
    return trace_if_refused(c->r, c->ord,
                            c->asked == UINT64_MAX ? 0
                            : c->mask != 0         ? c->asked
                                                   : 0);
}

/* The memory stays in the graph pool: only the table forgets the graph. */
static bool
exec_take(struct hook_call *c, vcu_graph_exec exec)
{
    return hook_take(c, TRACK_EXEC, (uint64_t)(uintptr_t)exec);
}

static vcu_result
exec_destroyed(struct hook_call *c, vcu_graph_exec exec)
{
    (void)exec;
    if (c->unref == TRACK_LAST && c->r != VCU_SUCCESS)
        (void)track_restore(&c->e);
    return c->r;
}

/* Graphs may have to map their memory again after a trim. */
static bool
graph_trimming(struct hook_call *c, vcu_device device)
{
    (void)c;
    (void)device;
    __atomic_fetch_add(&trims, 1, __ATOMIC_ACQ_REL);
    return true;
}

static vcu_result
graph_trimmed(struct hook_call *c, vcu_device device)
{
    if (c->r == VCU_SUCCESS)
        (void)graph_pool_settle(device);
    return c->r;
}

/* The exported hooks, written from their rows in hooks.h. */
PRELOAD_HOOKS_GRAPH(PRELOAD_HOOK_DEFINE)
