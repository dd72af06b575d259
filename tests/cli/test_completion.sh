#!/bin/sh
# SPDX-License-Identifier: MIT
# test_completion.sh -- contrib/bash-completion/vram as bash runs it: the
# commands, a command's options, the values of an option from the
# program's own tables (--strategy, --precision, --sort, --backend, admin's
# actions...) and never file names there; files where a file is expected;
# a command after `vram run`. Each case runs twice: with bash-completion's
# _init_completion (Debian's bash-completion package) and without it (the
# script's own fallback), unless that package is missing. Also "did you
# mean" for a mistyped command and option. Exit 77 without bash.
# Usage: test_completion.sh VRAM REPO_ROOT
set -u
VRAM=$1
ROOT=$2
command -v bash >/dev/null || { echo "skipped: no bash"; exit 77; }
. "$(dirname "$0")/lib.sh"
test_begin completion
absolute VRAM
SCRIPT=$ROOT/contrib/bash-completion/vram
BC=/usr/share/bash-completion/bash_completion
# Files that a file completion would offer, so that offering them where a
# value is expected shows.
mkdir -p "$TMP/cwd"
touch "$TMP/cwd/growth.txt" "$TMP/cwd/mixed.json" "$TMP/cwd/used.csv" "$TMP/cwd/enable.sh"

# complete WITH_BC LINE: the candidates for LINE (the last word is the one
# completed; a trailing space starts a new word), sorted, one line.
complete_line() {
    (cd "$TMP/cwd" && bash --norc --noprofile -c '
        [ "$1" = yes ] && . "$2"
        . "$3"
        line=$5
        read -ra COMP_WORDS <<<"$line"
        COMP_WORDS[0]=$4
        [ "${line% }" != "$line" ] && COMP_WORDS+=("")
        COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
        COMP_LINE="$4${line#vram}"
        COMP_POINT=${#COMP_LINE}
        _vram
        [ ${#COMPREPLY[@]} -eq 0 ] || printf "%s\n" "${COMPREPLY[@]}" | sort | tr "\n" " "
    ' sh "$1" "$BC" "$SCRIPT" "$VRAM" "$2")
}
modes=no
[ -f "$BC" ] && modes="yes no"
# case LINE EXPECTED: the candidates must be exactly EXPECTED (space-ended).
case_is() {
    for m in $modes; do
        got=$(complete_line "$m" "$1")
        if [ "$got" = "$2" ]; then
            pass "'$1' (bash-completion: $m): $2"
        else
            fail "'$1' (bash-completion: $m)" "got '$got', expected '$2'"
        fi
    done
}
# case_has LINE WORD: WORD is among the candidates.
case_has() {
    for m in $modes; do
        got=$(complete_line "$m" "$1")
        case " $got" in
        *" $2 "*) pass "'$1' (bash-completion: $m) offers $2" ;;
        *) fail "'$1' (bash-completion: $m) offers $2" "got '$got'" ;;
        esac
    done
}

case_is "vram r" "record replay run "
case_is "vram help t" "top tune "
case_is "vram top --s" "--sort "
case_is "vram top --sort " "peak pid trend used "
case_is "vram top --sort=p" "--sort=peak --sort=pid "
case_is "vram top -d " ""
case_is "vram plan --precision " "bf16 fp16 fp32 mixed-bf16 mixed-fp16 "
case_is "vram plan --precision mixed-b" "mixed-bf16 "
case_is "vram plan --optimizer " "adam adamw sgd sgd-momentum "
case_is "vram plan --attention " "eager sdpa "
case_is "vram plan --zero " "0 1 2 3 "
case_is "vram plan --gpu-memory " ""
case_is "vram replay --backend " "cuda sim "
case_is "vram replay --strategy " "all expandable growth growth:tf-compat preallocate "
case_is "vram replay --strategy growth,e" "growth,expandable "
case_is "vram analyze --strategy ex" "expandable "
case_is "vram admin " "check disable enable status "
case_is "vram admin st" "status "
case_has "vram plan --config " "mixed.json"
case_has "vram analyze " "used.csv"
case_has "vram run --limit 6G " "sh"
case_has "vram run -- " "sh"
case_has "vram run -- sh " "enable.sh"
case_has "vram --" "--version"
# growth:tf-compat has a colon, which bash splits words at.
if [ -f "$BC" ]; then
    got=$(complete_line yes "vram analyze --strategy growth:")
    check "'vram analyze --strategy growth:' completes the rest (bash-completion)" \
        "[ '$got' = 'tf-compat ' ]"
fi

# Did you mean: a mistyped command, option, value.
"$VRAM" anlyze >"$TMP/out" 2>"$TMP/err"
check "vram anlyze: did you mean 'analyze'? (exit 2)" \
    "[ $? -eq 2 ] && grep -q \"^vram: unknown command 'anlyze' (did you mean 'analyze'?)\" '$TMP/err'"
"$VRAM" plan --gpu-memroy 8G >"$TMP/out" 2>"$TMP/err"
check "vram plan --gpu-memroy: did you mean '--gpu-memory'?" \
    "[ $? -eq 2 ] && grep -q \"unknown option '--gpu-memroy' (did you mean '--gpu-memory'?)\" '$TMP/err'"
"$VRAM" run -limit 6G -- true >"$TMP/out" 2>"$TMP/err"
check "vram run -limit: did you mean '--limit'?" \
    "[ $? -eq 2 ] && grep -q \"unknown option '-limit' (did you mean '--limit'?)\" '$TMP/err'"
"$VRAM" top --sort peek >"$TMP/out" 2>"$TMP/err"
check "vram top --sort peek: did you mean 'peak'?" \
    "[ $? -eq 2 ] && grep -q \"expected used, peak, trend or pid (did you mean 'peak'?)\" '$TMP/err'"
"$VRAM" xyzzy >"$TMP/out" 2>"$TMP/err"
check "vram xyzzy: no guess when nothing is near" \
    "[ $? -eq 2 ] && grep -q \"^vram: unknown command 'xyzzy' (try\" '$TMP/err'"
"$VRAM" replay --d x >"$TMP/out" 2>"$TMP/err"
check "an ambiguous prefix names the options it could be" \
    "grep -q \"ambiguous option '--d' (--device-memory, --driver-costs)\" '$TMP/err'"
test_end
