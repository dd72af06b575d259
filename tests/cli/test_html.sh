#!/bin/sh
# SPDX-License-Identifier: MIT
# test_html.sh -- `vram analyze --html` checked as a person would: the
# report of each trace below is written, read back as HTML (it parses, its
# tags balance, every section is there, nothing in it points outside the
# file: no URL, no src or href, no script, no style sheet or font to
# fetch), then opened in headless Chromium with the network out of reach
# and photographed; the picture must not be blank and must show the
# charts (the exact blue of the live bytes and orange of the reserved
# bytes, in quantity). The pages and the screenshots stay in OUT_DIR to be
# looked at: OUT_DIR/leak_mlp.html, OUT_DIR/leak_mlp.png, ...
#
# Exit 77 (skipped) while `vram analyze` does not exist, and when Chromium
# or python3 is missing (scripts/install-deps.sh installs both) -- after
# the checks that need no browser, so a broken page still fails.
# Usage: tests/cli/test_html.sh path/to/vram REPO_ROOT OUT_DIR
set -u

if [ $# -ne 3 ]; then
    echo "usage: test_html.sh VRAM_BINARY REPO_ROOT OUT_DIR" >&2
    exit 2
fi
VRAM=$1
ROOT=$2
OUT=$3
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
TRACES="leak_mlp resnet50_fp32"

mkdir -p "$OUT" || exit 1
. "$(dirname "$0")/lib.sh"
test_begin html

if ! command -v python3 >/dev/null 2>&1; then
    echo "skip: python3 is not installed (scripts/install-deps.sh installs it)"
    exit 77
fi
"$VRAM" analyze --help >/dev/null 2>"$TMP/err"
if grep -q "unknown command" "$TMP/err"; then
    echo "skip: this vram has no 'analyze' command yet"
    exit 77
fi

# ---- the page itself: parse, balance, sections, self-contained ----
cat >"$TMP/check_page.py" <<'EOF'
import re, sys
from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
        "source", "track", "wbr"}
# SVG elements written as <x .../> (self-closing is fine in SVG).
SECTIONS = ["summary", "figures", "timeline", "peak", "leak"]

class Page(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.errors, self.ids, self.tags = [], [], [], {}
    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        for name, value in attrs:
            if name in ("src", "href", "xlink:href", "srcset", "action", "background",
                        "poster", "data", "formaction"):
                self.errors.append(f"<{tag} {name}=...> refers to something outside")
            if name == "id":
                self.ids.append(value)
        if tag in ("script", "link", "iframe", "img", "object", "embed", "base", "video",
                   "audio", "source", "form"):
            self.errors.append(f"<{tag}> in a self-contained report")
        if tag not in VOID:
            self.stack.append(tag)
    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()
    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else '-'}>")
            if tag in self.stack:
                while self.stack.pop() != tag:
                    pass
        else:
            self.stack.pop()

path, name = sys.argv[1], sys.argv[2]
text = open(path, encoding="utf-8").read()
errors = []
if not text.startswith("<!DOCTYPE html>"):
    errors.append("does not start with <!DOCTYPE html>")
for needle in ("http", "//", "url(", "@import", "@font-face", "src=", "href="):
    if needle in text.lower():
        errors.append(f"contains {needle!r}")
page = Page()
page.feed(text)
page.close()
errors += page.errors
if page.stack:
    errors.append("left open: " + " ".join(page.stack))
for tag in ("html", "head", "body", "title", "style", "main"):
    if page.tags.get(tag) != 1:
        errors.append(f"{page.tags.get(tag, 0)} <{tag}> elements")
for sid in SECTIONS:
    if sid not in page.ids:
        errors.append(f"no section id={sid!r}")
if len(page.ids) != len(set(page.ids)):
    errors.append("duplicate ids")
# The timeline (an area and two lines, the peak's dot) and the leak chart.
if page.tags.get("svg", 0) < 2 or page.tags.get("path", 0) < 3 or not page.tags.get("circle"):
    errors.append(f"{page.tags.get('svg', 0)} charts, {page.tags.get('path', 0)} paths, "
                  f"{page.tags.get('circle', 0)} dots")
title = re.search(r"<title>(.*?)</title>", text, re.S)
if not title or name not in title.group(1):
    errors.append(f"the title does not name {name}")
if not re.search(r"\d (KiB|MiB|GiB)", text) or re.search(r"\d (KB|MB|GB)\b", text):
    errors.append("sizes are not in IEC units")
if name.startswith("leak_mlp") and "Memory grew" not in text:
    errors.append("leak_mlp (a leak by construction) has no 'Memory grew' verdict")
if name.startswith("leak_mlp") and "is full after about" not in text:
    errors.append("leak_mlp has no projection of when its device is full")
for e in errors:
    print(e)
sys.exit(1 if errors else 0)
EOF

# ---- the picture: size, not blank, the charts' colours present ----
cat >"$TMP/check_png.py" <<'EOF'
import struct, sys, zlib
from collections import Counter

path, want_w, want_h = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = open(path, "rb").read()
if data[:8] != b"\x89PNG\r\n\x1a\n":
    sys.exit("not a PNG")
pos, idat = 8, []
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR":
        w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
    elif kind == b"IDAT":
        idat.append(body)
    pos += 12 + n
if (w, h) != (want_w, want_h) or depth != 8 or ctype not in (2, 6):
    sys.exit(f"{w}x{h}, depth {depth}, colour type {ctype}")
if len(data) < 20000:
    sys.exit(f"only {len(data)} bytes")
bpp = 3 if ctype == 2 else 4
stride = w * bpp
raw = zlib.decompress(b"".join(idat))
prev = bytearray(stride)
colours = Counter()
for y in range(h):
    f = raw[y * (stride + 1)]
    line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    if f == 1:
        for i in range(bpp, stride):
            line[i] = (line[i] + line[i - bpp]) & 255
    elif f == 2:
        for i in range(stride):
            line[i] = (line[i] + prev[i]) & 255
    elif f == 3:
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            line[i] = (line[i] + (a + prev[i]) // 2) & 255
    elif f == 4:
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    colours.update(bytes(line[i:i + 3]) for i in range(0, stride, bpp))
    prev = line
errors = []
if len(colours) <= 50:
    errors.append(f"{len(colours)} distinct colours")
background = colours.most_common(1)[0][1]
if background > 0.97 * w * h:
    errors.append(f"{100 * background / (w * h):.1f}% of the pixels are one colour")
live, reserved = colours[bytes((0x25, 0x63, 0xeb))], colours[bytes((0xc2, 0x41, 0x0c))]
if live < 2000:
    errors.append(f"{live} pixels of the live-bytes blue (bars and lines not drawn?)")
if reserved < 200:
    errors.append(f"{reserved} pixels of the reserved-bytes orange")
print(f"{w}x{h}, {len(data)} bytes, {len(colours)} colours, {live} blue and "
      f"{reserved} orange pixels")
for e in errors:
    print(e)
sys.exit(1 if errors else 0)
EOF

for name in $TRACES; do
    trace=$ROOT/data/traces/$name.trace.csv.gz
    html=$OUT/$name.html
    rm -f "$html"
    "$VRAM" analyze --html "$html" "$trace" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    if [ $rc -ne 0 ]; then
        fail "$name: vram analyze --html" "exit $rc: $(head -n 3 "$TMP/err")"
        continue
    fi
    if [ ! -s "$html" ]; then
        fail "$name: vram analyze --html" "wrote no $html"
        continue
    fi
    if python3 "$TMP/check_page.py" "$html" "$name" >"$TMP/page" 2>&1; then
        pass "$name: self-contained, well-formed page with every section"
    else
        fail "$name: the page" "$(head -n 5 "$TMP/page" | tr '\n' ';')"
    fi
done

if [ ! -x "$CHROMIUM" ]; then
    echo "$passed passed, $failed failed"
    [ "$failed" -ne 0 ] && exit 1
    echo "skip: no Chromium at $CHROMIUM (scripts/install-deps.sh installs it)"
    exit 77
fi

# ---- the screenshots ----
# The flags of .library's Chromium note: headless, no sandbox (root in CI),
# no GPU, nothing started in the background that would reach the network;
# plus a resolver that resolves nothing, so that the page could not load
# anything even if it tried.
W=1280
H=3600
for name in $TRACES; do
    html=$OUT/$name.html
    png=$OUT/$name.png
    [ -s "$html" ] || continue
    rm -f "$png"
    rm -rf "$TMP/profile"
    HOME=$TMP timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic \
        --no-first-run --disable-background-networking --disable-component-update \
        --disable-sync --user-data-dir="$TMP/profile" --host-resolver-rules="MAP * ~NOTFOUND" \
        --hide-scrollbars --force-device-scale-factor=1 --window-size=$W,$H \
        --screenshot="$png" "file://$html" >"$TMP/chromium.log" 2>&1
    rc=$?
    if [ $rc -ne 0 ] || [ ! -s "$png" ]; then
        fail "$name: screenshot" "chromium exit $rc: $(grep -v -e dbus -e 'bytes written' "$TMP/chromium.log" | tail -n 3)"
        continue
    fi
    if python3 "$TMP/check_png.py" "$png" $W $H >"$TMP/png" 2>&1; then
        pass "$name: screenshot $png ($(head -n 1 "$TMP/png"))"
    else
        fail "$name: screenshot $png" "$(tr '\n' ';' <"$TMP/png")"
    fi
done

test_end
