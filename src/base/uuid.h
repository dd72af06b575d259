/* SPDX-License-Identifier: MIT */
/*
** uuid.h -- a GPU's UUID as text, the way nvidia-smi and NVML print it:
** "GPU-" and 16 bytes in the groups 8-4-4-4-12 of lowercase hex digits.
** The CUDA backend and the preload library both key devices by it.
*/
#ifndef VRAM_BASE_UUID_H
#define VRAM_BASE_UUID_H

#include <stddef.h>

/* Bytes of the text with its NUL: "GPU-" + 36 + 1. */
#define UUID_TEXT_LEN 41

/* Write BYTES (16 of them) as text into BUF (LEN bytes, cut if shorter
** than UUID_TEXT_LEN; always NUL-terminated when LEN > 0). */
void uuid_format(const unsigned char bytes[16], char *buf, size_t len);

#endif
