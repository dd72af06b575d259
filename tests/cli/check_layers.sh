#!/bin/sh
# SPDX-License-Identifier: MIT
# check_layers.sh -- the layers of docs/INTERNALS.md point one way: every
# #include "..." of a C file in src/, tools/, slurm/ and bench/ names a
# file of its own layer, of a layer below it, or include/vram.h (the
# public API, below everything). A file's layer is its directory's row in
# the table below; a directory without a row is an error, so that a new
# one must say where it stands.
# Usage: check_layers.sh REPO_ROOT
set -u
cd "$1" || exit 2

# LAYER  DIRECTORY  LAYERS IT STANDS ON DIRECTLY (those below them too)
table='
base       src/base
driver     src/driver
quota      src/quota      base
config     src/config     base quota
trace      src/trace      base
backend    src/backend    base driver
core       src/core       base config trace backend
torch      src/torch      core
analyze    src/analyze    core trace
plan       src/plan       base
ledger     src/ledger     base
policy     src/policy     base quota
preload    src/preload    base quota config trace driver ledger policy
monitor    src/monitor    base driver ledger policy
common     tools/common   base trace
tools      tools/vram     common torch analyze plan preload monitor
slurm      slurm          base ledger
bench      bench/gpu      common core
'

files=$(find src tools slurm bench -name '*.[ch]' | sort)
# One line per quoted include: FILE:LINE:#include "NAME"
includes=$(grep -Hn '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' $files)

{
    printf '%s\n' "$table" | sed '/^[[:space:]]*$/d' | sed 's/^/T /'
    find include src tools slurm bench -type f | sed 's/^/F /'
    printf '%s\n' "$includes" | sed '/^$/d' | sed 's/^/I /'
} | awk '
function layer_of(path,    d, best, n) {
    best = ""
    for (d in dir_layer) {
        n = length(d)
        if (substr(path, 1, n + 1) == d "/" && n > length(best))
            best = d
    }
    return best == "" ? "" : dir_layer[best]
}
function dirname(path,    i) {
    i = match(path, /\/[^\/]*$/)
    return i ? substr(path, 1, i - 1) : "."
}
$1 == "T" {
    dir_layer[$3] = $2
    known[$2] = 1
    deps[$2] = ""
    for (i = 4; i <= NF; i++)
        deps[$2] = deps[$2] " " $i
    next
}
$1 == "F" { exists[$2] = 1; next }
$1 == "I" {
    line = substr($0, 3)
    split(line, part, ":")
    file = part[1]; lineno = part[2]
    name = line
    sub(/^[^"]*"/, "", name)
    sub(/".*$/, "", name)
    includes[++n_inc] = file SUBSEP lineno SUBSEP name
    next
}
END {
    # Each layer with every layer below it (the transitive closure).
    for (l in known) {
        below[l, l] = 1
        n = split(deps[l], d, " ")
        for (i = 1; i <= n; i++) {
            if (!(d[i] in known)) {
                printf "check_layers: layer %s stands on unknown layer %s\n", l, d[i]
                bad = 1
            }
            below[l, d[i]] = 1
        }
    }
    do {
        changed = 0
        for (a in known) for (b in known) if ((a, b) in below)
            for (c in known) if ((b, c) in below && !((a, c) in below)) {
                below[a, c] = 1
                changed = 1
            }
    } while (changed)

    for (k = 1; k <= n_inc; k++) {
        split(includes[k], f, SUBSEP)
        file = f[1]; lineno = f[2]; name = f[3]
        from = layer_of(file)
        if (from == "") {
            if (!(dirname(file) in said)) {
                printf "check_layers: %s has no row in the table of tests/cli/check_layers.sh\n", dirname(file)
                said[dirname(file)] = 1
            }
            bad = 1
            continue
        }
        # Where the compiler finds it: beside the file, then the include
        # directories of CMakeLists.txt (include, src, tools/common).
        target = ""
        split(dirname(file) " include src tools/common", dirs, " ")
        for (i = 1; i <= 4 && target == ""; i++)
            if ((dirs[i] "/" name) in exists)
                target = dirs[i] "/" name
        if (target == "") {
            printf "%s:%s: #include \"%s\": no such file in the tree\n", file, lineno, name
            bad = 1
            continue
        }
        if (target ~ /^include\//)
            continue
        to = layer_of(target)
        if (to == "") {
            printf "%s:%s: #include \"%s\": %s has no layer\n", file, lineno, name, dirname(target)
            bad = 1
        } else if (!((from, to) in below)) {
            printf "%s:%s: #include \"%s\": layer %s may not include layer %s\n", file, lineno, name, from, to
            bad = 1
        }
    }
    if (!bad)
        printf "layers: ok (%d includes)\n", n_inc
    exit bad
}'
