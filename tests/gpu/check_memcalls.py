#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""check_memcalls.py -- the SDK's cuda.h against the preload library's table
of memory-making entry points (src/preload/memcalls.h) and its hook list
(PRELOAD_HOOKS, src/preload/hooks.h). Fails on:
  - a function of cuda.h whose base name (without _vN, _ptsz, _ptds) is in
    one of the table's families (PRELOAD_MEMORY_FAMILIES) and not in the
    table: a new way of making the device hold memory that nobody
    classified;
  - a variant cuda.h declares of a name the table marks hooked that is not
    a row of PRELOAD_HOOKS: a new ABI (a cuMemAlloc_v3) the hooks would miss.
Both headers are read through the C preprocessor, as the compiler reads
them (cuda.h with and without CUDA_API_PER_THREAD_DEFAULT_STREAM). Run by
CTest where cuda.h is found (check_memcalls, label gpu); prints one line
per problem and a summary; exit 0 when there is none, 1 otherwise.

Usage: check_memcalls.py --cuda-include DIR --source REPO [--cc CC]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

DECL = re.compile(r"\bCUresult\s+(?:__attribute__\(\([^)]*\)\)\s*)?(cu[A-Za-z0-9_]+)\s*\(")


def preprocess(cc, text, includes, defines=()):
    with tempfile.NamedTemporaryFile("w", suffix=".c", delete=False) as f:
        f.write(text)
        path = f.name
    try:
        cmd = [cc, "-E", "-P"] + ["-I" + i for i in includes] + ["-D" + d for d in defines]
        out = subprocess.run(cmd + [path], capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit("check_memcalls: the preprocessor failed: " + out.stderr.strip()[:400])
        return out.stdout
    finally:
        os.unlink(path)


def base(name):
    name = re.sub(r"_(ptsz|ptds)$", "", name)
    return re.sub(r"_v[0-9]+$", "", name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cuda-include", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--cc", default="cc")
    a = ap.parse_args()
    inc = [os.path.join(a.source, "src"), os.path.join(a.source, "include"), a.cuda_include]

    declared = set()
    for defines in ((), ("CUDA_API_PER_THREAD_DEFAULT_STREAM",)):
        declared |= set(DECL.findall(preprocess(a.cc, "#include <cuda.h>\n", inc, defines)))
    if not declared:
        sys.exit("check_memcalls: no function found in cuda.h")

    rows = preprocess(a.cc, "\n".join([
        "#define PRELOAD_HOOKS_LIST_ONLY",
        '#include "preload/hooks.h"',
        '#include "preload/memcalls.h"',
        "#define X(name, how, why) @ROW name how",
        "PRELOAD_MEMORY_CALLS(X)",
        "#undef X",
        "#define F(re) @FAMILY re",
        "PRELOAD_MEMORY_FAMILIES(F)",
        "#define X(symbol, type, asked, since, until, stream, lib, b, a, p, r) @HOOK symbol",
        "PRELOAD_HOOKS(X)",
        ""]), inc)
    table, families, hooked = {}, [], set()
    for tok in rows.split("@")[1:]:
        words = tok.split(None, 2)
        if words[0] == "ROW":
            table[words[1]] = words[2].split()[0]
        elif words[0] == "FAMILY":
            families.append(re.compile(eval(tok[len("FAMILY"):].strip())))
        elif words[0] == "HOOK":
            hooked.add(words[1])

    problems, in_families = [], 0
    for name in sorted(declared):
        b = base(name)
        fam = [f.pattern for f in families if f.search(b)]
        if fam:
            in_families += 1
            if b not in table:
                problems.append("cuda.h declares %s (family %s), which memcalls.h does not "
                                "classify" % (name, fam[0]))
        if table.get(b) == "MEM_HOOKED" and name not in hooked:
            problems.append("cuda.h declares %s, a variant of the hooked %s that no row of "
                            "PRELOAD_HOOKS is" % (name, b))
    for p in problems:
        print("FAIL " + p)
    print("%d functions in cuda.h, %d in the memory families, %d classified in memcalls.h, "
          "%d hooks: %d problems" % (len(declared), in_families, len(table), len(hooked),
                                      len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
