#!/bin/sh
# SPDX-License-Identifier: MIT
# bench_exporter.sh -- `make bench`: how long root's scrapes of `vram
# exporter` take, alone and while another local user (nobody) holds 2,000
# idle connections from addresses all over 127/8 plus 100 slowloris
# tricklers (tests/cli/exporter_clients.py): 200 scrapes each way, the
# median and the slowest. The target is every scrape under 1 s with the
# hostile user there (docs/MONITORING.md, "Who may hold how many
# connections"). Needs root (the hostile user runs as nobody); skipped
# otherwise.
# Usage: scripts/bench_exporter.sh VRAM_BINARY
set -u
VRAM=$1
if [ "$(id -u)" -ne 0 ] || ! command -v setpriv >/dev/null || [ ! -x /usr/bin/python3 ]; then
    echo "bench_exporter: needs root, setpriv and /usr/bin/python3: skipped"
    exit 0
fi
CLIENTS="$(dirname "$0")/../tests/cli/exporter_clients.py"
TMP=$(mktemp -d)
chmod 755 "$TMP"
trap 'touch "$TMP/stop"; kill $EXP 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"' EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$VRAM" exporter --no-nvml --listen "127.0.0.1:$PORT" --interval 1 >"$TMP/exp.log" 2>&1 &
EXP=$!
until python3 -c "import socket; socket.create_connection(('127.0.0.1', $PORT)).close()" 2>/dev/null; do
    kill -0 $EXP 2>/dev/null || { cat "$TMP/exp.log"; exit 1; }
    sleep 0.1
done
echo "## The exporter under hostile local users, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "- machine: $(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -n 1), $(nproc) CPUs, $(uname -sr)"
echo "- vram: $("$VRAM" --version)"
echo "- command: \`make bench\` (scripts/bench_exporter.sh): 200 scrapes by root, one after the other"
echo
python3 "$CLIENTS" "$PORT" - scrape 200 | tail -n 1 | sed 's/^/- alone: /'
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"; }
as_nobody /usr/bin/python3 "$CLIENTS" "$PORT" "$TMP/stop" hold 2000 >"$TMP/hold" 2>&1 &
as_nobody /usr/bin/python3 "$CLIENTS" "$PORT" "$TMP/stop" loris 100 >"$TMP/loris" 2>&1 &
until grep -q ready "$TMP/hold" && grep -q ready "$TMP/loris"; do sleep 0.1; done
python3 "$CLIENTS" "$PORT" - scrape 200 >"$TMP/scrapes"
tail -n 1 "$TMP/scrapes" | sed 's/^/- nobody holding 2,000 idle connections and 100 tricklers: /'
slow=$(awk '$1 == "scrape" && $3 > 1.0' "$TMP/scrapes" | wc -l)
echo "- scrapes over 1 s with the hostile user there: $slow of 200 ($(grep -c '^scrape 200 ' "$TMP/scrapes") answered 200)"
