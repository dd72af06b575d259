/* SPDX-License-Identifier: MIT */
/*
** route_helper.c -- a library linked to the (fake) driver, calling
** cuMemAlloc_v2 directly: what a program loads with RTLD_DEEPBIND or into
** another link-map namespace (dlmopen) to reach the driver around the
** preload library. The probe's "bypass" scenario loads it both ways.
*/
#include "driver/cuda_api.h"

#define X(field, symbol, fallback, need, ret, params) ret symbol params;
VCU_ENTRY_POINTS(X, VCU_OWN_TYPE)
#undef X

__attribute__((visibility("default"))) int helper_alloc(unsigned long long bytes,
                                                        unsigned long long *ptr);
__attribute__((visibility("default"))) int helper_free(unsigned long long ptr);

/* cuMemAlloc_v2 of BYTES on the current context, the pointer into *PTR. */
int
helper_alloc(unsigned long long bytes, unsigned long long *ptr)
{
    vcu_deviceptr p = 0;
    vcu_result r = cuMemAlloc_v2(&p, bytes);
    *ptr = p;
    return (int)r;
}

int
helper_free(unsigned long long ptr)
{
    return (int)cuMemFree_v2(ptr);
}
