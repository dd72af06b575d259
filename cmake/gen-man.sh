#!/bin/sh
# SPDX-License-Identifier: MIT
# gen-man.sh -- the man pages of vram, made at build time from what the
# program and the sources say, so that they cannot drift from them:
#   man1/vram.1       help2man from `vram --help`, with ENVIRONMENT (the
#                     environment table, `vram env --markdown`) and FILES
#   man1/vram-CMD.1   help2man from `vram CMD --help`, for every command
#                     `vram help` lists (the one table of subcommands in
#                     tools/vram/main.c): a new subcommand gets its page
#                     without a change here
#   man3/vram.3       the API, from include/vram.h (gen-man3.sh)
#   man5/policy.conf.5  the host's policy file (cmake/policy.conf.5, with
#                     the example contrib/policy/policy.conf)
# and each page compressed (gzip -9n, as Debian installs them) under
# OUTDIR/gz/manN/. Usage: gen-man.sh VRAM_BINARY VERSION SOURCE_DIR OUTDIR
set -eu
if [ $# -ne 4 ]; then
    echo "usage: gen-man.sh VRAM_BINARY VERSION SOURCE_DIR OUTDIR" >&2
    exit 2
fi
vram=$1
version=$2
src=$3
top=$4
out=$top/man1
mkdir -p "$out" "$top/man3" "$top/man5"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vram-man.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

# The commands and their summaries, as `vram help` prints them: "  NAME
# SUMMARY" lines under "Commands:", a summary possibly continued on more
# indented lines, up to the first empty line.
"$vram" help | awk '
    /^Commands:/ { on = 1; next }
    on && /^$/ { exit }
    on && /^  [a-z]/ {
        if (name != "") print name "\t" sum
        name = $1; sum = $0; sub(/^  [a-z][a-z0-9-]* +/, "", sum); next
    }
    on && /^   +[^ ]/ { line = $0; sub(/^ +/, "", line); sum = sum " " line }
    END { if (name != "") print name "\t" sum }' >"$tmp/commands"
if [ ! -s "$tmp/commands" ]; then
    echo "gen-man.sh: '$vram help' lists no commands" >&2
    exit 1
fi

see_also=$(awk -F '\t' '{printf "%sB vram-%s (1)", (NR > 1 ? ",\n." : "."), $1}' "$tmp/commands")
{
    # ENVIRONMENT: the rows of `vram env --markdown`, by section.
    cat <<'TEXT'
[ENVIRONMENT]
vram reads these variables; \fBvram env\fR prints the value each has here
and where it came from. Sizes are 1024-based and need a unit (\fB6G\fR,
\fB512M\fR, \fB1073741824B\fR); a malformed limit is an error, never
\(lqunlimited\(rq.
TEXT
    "$vram" env --markdown | awk '
        function roff(s) {
            gsub(/\\/, "\\e", s)
            while (match(s, /`[^`]*`/)) {
                s = substr(s, 1, RSTART - 1) "\\fB" substr(s, RSTART + 1, RLENGTH - 2) "\\fR" \
                    substr(s, RSTART + RLENGTH)
            }
            sub(/^[.\047]/, "\\\\\\&&", s)
            return s
        }
        /^## / { title = substr($0, 4); print ".SS \"" title "\""; next }
        /^\| `/ {
            n = split($0, cell, "|")
            name = cell[2]; def = cell[3]; doc = cell[4]
            gsub(/^ +| +$/, "", name); gsub(/^ +| +$/, "", def); gsub(/^ +| +$/, "", doc)
            gsub(/`/, "", name)
            print ".TP"
            print ".B " roff(name)
            print roff(doc) " Default: " roff(def) "."
        }'
    cat <<'TEXT'
[FILES]
.TP
.I /etc/vram/policy.conf
The host's GPU memory policy, read by the preload library in every process
once \fBvram admin enable\fR has put the library in \fI/etc/ld.so.preload\fR:
see
.BR policy.conf (5).
.TP
.I /etc/ld.so.preload
Where \fBvram admin enable\fR names the preload library.
.TP
.I /dev/shm/vram-UID/GROUP
The ledger of a group's processes (their quota, use and refusals), which
\fBvram stat\fR, \fBvram top\fR and \fBvram exporter\fR read.
[SEE ALSO]
TEXT
    printf '%s,\n' "$see_also"
    cat <<'TEXT'
.BR policy.conf (5),
.BR vram (3).
.PP
The documents in /usr/share/doc/vram (docs/ in the source tree).
TEXT
} >"$tmp/see-also.h2m"

# help2man runs a program and reads its --help; these wrappers stand for
# `vram` and `vram CMD`, and write "usage:" as "Usage:", the word help2man
# takes the SYNOPSIS from. The exit status is the command's own.
wrapper() { # wrapper NAME [CMD]
    {
        echo '#!/bin/sh'
        echo "out=\$(\"$vram\" $2 \"\$@\") || exit \$?"
        echo 'printf "%s\n" "$out" | sed "s/^usage: /Usage: /"'
    } >"$tmp/$1"
    chmod +x "$tmp/$1"
}

wrapper vram ""
help2man --no-info --section=1 --version-string="$version" \
    --name="GPU memory management for deep learning" \
    --include="$tmp/see-also.h2m" --output="$out/vram.1" "$tmp/vram"

while IFS="$(printf '\t')" read -r cmd summary; do
    wrapper "vram-$cmd" "$cmd"
    printf '[SEE ALSO]\n.BR vram (1)\n' >"$tmp/cmd.h2m"
    if "$tmp/vram-$cmd" --help >/dev/null 2>&1; then
        help2man --no-info --section=1 --version-string="$version" --name="$summary" \
            --include="$tmp/cmd.h2m" --output="$out/vram-$cmd.1" "$tmp/vram-$cmd"
    else
        # A command without a working --help still gets a page (its summary),
        # and the build says so: `vram CMD --help` must print its help on
        # stdout and exit 0.
        echo "gen-man.sh: warning: 'vram $cmd --help' fails: its man page has only the summary" >&2
        cat >"$out/vram-$cmd.1" <<PAGE
.TH VRAM-$(echo "$cmd" | tr '[:lower:]' '[:upper:]') 1 "" "vram $version" "User Commands"
.SH NAME
vram-$cmd \\- $summary
.SH SYNOPSIS
.B vram $cmd
[\\fIOPTIONS\\fR]
.SH DESCRIPTION
$summary.
.SH SEE ALSO
.BR vram (1)
PAGE
    fi
done <"$tmp/commands"

# The API page and the policy file's page.
sh "$src/cmake/gen-man3.sh" "$src/include/vram.h" "$version" >"$top/man3/vram.3"
sed -e "s/@VERSION@/$version/" -e '/^@EXAMPLE@$/{' -e "r $src/contrib/policy/policy.conf" \
    -e 'd' -e '}' "$src/cmake/policy.conf.5" >"$top/man5/policy.conf.5"

# Compressed, as installed: gzip -9, without a name or time (reproducible).
for dir in man1 man3 man5; do
    mkdir -p "$top/gz/$dir"
    for page in "$top/$dir"/*.[0-9]; do
        gzip -9 -n -c "$page" >"$top/gz/$dir/$(basename "$page").gz"
    done
done
