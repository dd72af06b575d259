/* SPDX-License-Identifier: MIT */
/*
** core.h -- what the layers above the allocator (the PyTorch plug-in) may
** use besides the public API of vram.h. Everything else of src/core is
** private to it (internal.h).
*/
#ifndef VRAM_CORE_CORE_H
#define VRAM_CORE_CORE_H

#include "vram.h"

/*
** Finish CTX's trace (VRAM_TRACE), if it records one: a gzip trace is
** complete after this. The context stays open; a later event is refused
** by the writer (at VRAM_LOG=1 the log says so once). For a process that
** is ending with the context still open.
*/
void context_trace_finish(vram_context *ctx);

#endif
