/* SPDX-License-Identifier: MIT */
/*
** elfsym.c -- a loaded object's function by its dynamic symbol table
** (elfsym.h): the ELF gABI's hash tables (the GNU one first, else the
** System V one) and glibc's version table (bit 15 of an entry: a hidden,
** non-default version).
*/
#include <elf.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/elfsym.h"

/* The preload library calls this from its dlsym override, which the
** sanitizer runtimes call before their own state exists. */
#define ELFSYM_EARLY __attribute__((no_sanitize("address", "thread", "undefined")))

/* What the dynamic section entry P of an object loaded at BASE points to:
** glibc relocates most entries in place, not where the section is
** read-only (RISC-V, MIPS). */
ELFSYM_EARLY static const void *
dyn_ptr(ElfW(Addr) p, ElfW(Addr) base)
{
    return (const void *)(p < base ? p + base : p);
}

/* Is symbol I (of SYM, named in STR) NAME, a defined function at its
** default version? */
ELFSYM_EARLY static int
matches(const ElfW(Sym) * sym, const char *str, const ElfW(Half) * versym, uint32_t i,
        const char *name)
{
    const ElfW(Sym) *s = &sym[i];
    return s->st_shndx != SHN_UNDEF && (s->st_info & 0xf) == STT_FUNC &&
           strcmp(str + s->st_name, name) == 0 &&
           (versym == NULL || (versym[i] & 0x8000) == 0);
}

ELFSYM_EARLY void *
elf_symbol(const struct link_map *lm, const char *name)
{
    const ElfW(Sym) *sym = NULL;
    const char *str = NULL;
    const uint32_t *gnu = NULL;
    const ElfW(Word) *sysv = NULL;
    const ElfW(Half) *versym = NULL;
    if (lm == NULL || name == NULL)
        return NULL;
    ElfW(Addr) base = lm->l_addr;
    for (const ElfW(Dyn) *d = lm->l_ld; d != NULL && d->d_tag != DT_NULL; d++) {
        if (d->d_tag == DT_SYMTAB)
            sym = dyn_ptr(d->d_un.d_ptr, base);
        else if (d->d_tag == DT_STRTAB)
            str = dyn_ptr(d->d_un.d_ptr, base);
        else if (d->d_tag == DT_GNU_HASH)
            gnu = dyn_ptr(d->d_un.d_ptr, base);
        else if (d->d_tag == DT_HASH)
            sysv = dyn_ptr(d->d_un.d_ptr, base);
        else if (d->d_tag == DT_VERSYM)
            versym = dyn_ptr(d->d_un.d_ptr, base);
    }
    if (sym == NULL || str == NULL)
        return NULL;
    if (gnu != NULL) {
        uint32_t nbuckets = gnu[0], symoffset = gnu[1], bloom_size = gnu[2];
        const ElfW(Addr) *bloom = (const ElfW(Addr) *)(const void *)&gnu[4];
        const uint32_t *buckets = (const uint32_t *)(const void *)&bloom[bloom_size];
        const uint32_t *chain = &buckets[nbuckets];
        uint32_t h = 5381;
        for (const unsigned char *c = (const unsigned char *)name; *c != '\0'; c++)
            h = h * 33 + *c;
        if (nbuckets == 0)
            return NULL;
        for (uint32_t i = buckets[h % nbuckets]; i >= symoffset && i != 0; i++) {
            uint32_t hc = chain[i - symoffset];
            if ((hc | 1) == (h | 1) && matches(sym, str, versym, i, name))
                return (void *)(base + sym[i].st_value);
            if (hc & 1)
                break;
        }
        return NULL;
    }
    if (sysv == NULL || sysv[0] == 0)
        return NULL;
    uint32_t h = 0;
    for (const unsigned char *c = (const unsigned char *)name; *c != '\0'; c++) {
        h = (h << 4) + *c;
        uint32_t g = h & 0xf0000000u;
        h ^= g >> 24;
        h &= ~g;
    }
    const ElfW(Word) *bucket = &sysv[2], *chain = &bucket[sysv[0]];
    for (uint32_t i = bucket[h % sysv[0]]; i != 0; i = chain[i])
        if (matches(sym, str, versym, i, name))
            return (void *)(base + sym[i].st_value);
    return NULL;
}
