/* SPDX-License-Identifier: MIT */
/*
** installdirs.h -- where the files installed beside the vram binary are,
** found from the binary's own location so that an installed tree can be
** moved (a DESTDIR staging root, an unpacked package) and the build tree
** works the same way: build/bin/vram finds build/lib/libvram-preload.so,
** /usr/bin/vram finds /usr/lib/x86_64-linux-gnu/libvram-preload.so.
*/
#ifndef VRAM_TOOLS_INSTALLDIRS_H
#define VRAM_TOOLS_INSTALLDIRS_H

#include <stdbool.h>
#include <stddef.h>

/*
** The path REL (relative to the directory of the running binary, e.g.
** "../lib/libvram-preload.so") made absolute, into BUF of LEN bytes.
** True if that file or directory exists; false otherwise, BUF then holding
** the path tried, or "" if the binary's location is unknown.
*/
bool installed_path(const char *rel, char *buf, size_t len);

#endif
