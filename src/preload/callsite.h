/* SPDX-License-Identifier: MIT */
/*
** callsite.h -- the code that made an allocation, for the trace's frames
** table (docs/TRACE_FORMAT.md, format 2): the calling thread's innermost
** Python frames, read through CPython's C API when the process runs
** Python, and its native return addresses, with their modules.
*/
#ifndef VRAM_PRELOAD_CALLSITE_H
#define VRAM_PRELOAD_CALLSITE_H

#include <stdint.h>

struct trace_writer;

/* Get ready to capture into W (a format-2 writer): load the unwinder now,
** not inside the first hook. HOLDERS: VRAM_TRACE_HOLDERS ("" unset), the
** recording's Python side (pyrecord.h). */
void callsite_init(struct trace_writer *w, const char *holders);

/* The call site of the calling thread's allocation, interned in W;
** TRACE_NO_SITE when none could be built (out of memory, a failed write). */
uint32_t callsite_capture(struct trace_writer *w);

/* In a forked child: the cache's lock is new (the parent's may have been
** held by another thread at the fork). */
void callsite_fork_child(void);

#endif
