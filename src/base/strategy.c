/* SPDX-License-Identifier: MIT */
/*
** strategy.c -- the names of the allocation strategies (VRAM_STRATEGY_LIST
** in vram.h), in the base layer because the environment loader and the
** allocator both need them and neither may depend on the other.
*/
#include <string.h>

#include "base/error.h"
#include "vram.h"

const char *
vram_strategy_name(vram_strategy s)
{
    switch (s) {
#define X(name, num, str)                                                                \
    case name:                                                                           \
        return str;
        VRAM_STRATEGY_LIST(X)
#undef X
    }
    return NULL;
}

vram_status
vram_strategy_parse(const char *text, vram_strategy *out)
{
    if (text == NULL || out == NULL)
        return error_set(VRAM_E_INVALID, "vram_strategy_parse: NULL argument");
#define X(name, num, str)                                                                \
    if (strcmp(text, str) == 0) {                                                        \
        *out = name;                                                                     \
        return VRAM_OK;                                                                  \
    }
    VRAM_STRATEGY_LIST(X)
#undef X
    return error_set(VRAM_E_INVALID,
                     "unknown strategy '%.64s' (expected preallocate, growth, "
                     "growth:tf-compat or expandable)",
                     text);
}
