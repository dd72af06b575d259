#!/bin/sh
# SPDX-License-Identifier: MIT
# gen-man.sh -- the man pages of vram, made at build time by help2man from
# the --help texts themselves, so that they cannot drift from the program:
# vram(1) from `vram --help`, and vram-CMD(1) from `vram CMD --help` for
# every command that `vram help` lists (the one table of subcommands in
# tools/vram/main.c), so a new subcommand gets its page without a change
# here. Usage: gen-man.sh VRAM_BINARY VERSION OUTDIR
set -eu
if [ $# -ne 3 ]; then
    echo "usage: gen-man.sh VRAM_BINARY VERSION OUTDIR" >&2
    exit 2
fi
vram=$1
version=$2
out=$3
mkdir -p "$out"
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
    echo "[SEE ALSO]"
    echo "$see_also"
    echo ".PP"
    echo "The documents in /usr/share/doc/vram (docs/ in the source tree)."
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
