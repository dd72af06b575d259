/* SPDX-License-Identifier: MIT */
/*
** pyrecord.h -- the recording's Python side (pyrecord.c): in a Python
** program recorded with call sites, vram's holders.py (VRAM_TRACE_HOLDERS)
** loaded as a module and given a function of this library to write marks
** and "#@held" lines and to list the live allocations.
*/
#ifndef VRAM_PRELOAD_PYRECORD_H
#define VRAM_PRELOAD_PYRECORD_H

#include <stdbool.h>

struct trace_writer;

/* The writer of the recording and VRAM_TRACE_HOLDERS ("" or NULL: none),
** once CPython's functions are found (pyapi_find). */
void pyrecord_init(struct trace_writer *w, const char *holders);

/* Have the module loaded, once: NOW (the caller is a pending call on the
** main thread, holding the GIL), else by the main thread at its next
** chance (a pending call); TOOL is the sys.monitoring tool id taken
** (3.12+), else -1. */
void pyrecord_ask(int tool, bool now);

/* A Python frame returns (the profile function's RETURN event, GIL held):
** the watched functions' returns go to the module. */
void pyrecord_return(void *frame);

/* In a forked child: the parent's recording is not the child's. */
void pyrecord_fork_child(void);

#endif
