/* SPDX-License-Identifier: MIT */
/*
** uuid.c -- a GPU's UUID as text (uuid.h).
*/
#include <stdio.h>

#include "base/uuid.h"

void
uuid_format(const unsigned char bytes[16], char *buf, size_t len)
{
    const unsigned char *x = bytes;
    snprintf(buf, len,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8], x[9], x[10], x[11],
             x[12], x[13], x[14], x[15]);
}
