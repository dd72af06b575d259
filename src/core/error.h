/*
** error.h -- the thread's last-error line behind vram_last_error().
*/
#ifndef VRAM_CORE_ERROR_H
#define VRAM_CORE_ERROR_H

#include "vram.h"

/* Set the calling thread's last-error line (printf-style) and return
** STATUS, so that callers can write: return error_set(VRAM_E_PARSE, ...); */
vram_status error_set(vram_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Clear the calling thread's last-error line (at the start of a public
** call). */
void error_clear(void);

#endif
