/* SPDX-License-Identifier: MIT */
/*
** hot.h -- VRAM_HOT marks the functions of the preload library's counted
** hooks: the compiler places them together (.text.hot), so that the code
** a hooked call runs spans few lines and pages. A hooked call runs right
** after a driver call that has walked the CPU's caches, and each line of
** code it then runs is fetched again. With the prefetches of the ledger's
** and the table's lines, it took the hooks' own time on the H200 from
** 145-168 to 114-131 ns an allocation, 97-103 to 75-82 a free, three
** interleaved rounds (BENCHMARKS.md, "Preload hook cost").
*/
#ifndef VRAM_BASE_HOT_H
#define VRAM_BASE_HOT_H

#define VRAM_HOT __attribute__((hot))

#endif
