#!/bin/sh
# png_ok.sh FILE: exit 0 when FILE is a PNG (the 8-byte signature, then an
# IHDR chunk) with a width and a height above 0; else a message and exit 1.
# Shared by the tests that check what --plot / homa-plot wrote.
f=$1
[ -s "$f" ] || { echo "png_ok: $f: missing or empty"; exit 1; }
sig=$(head -c 8 "$f" | od -An -tx1 | tr -d ' \n')
[ "$sig" = 89504e470d0a1a0a ] || { echo "png_ok: $f: no PNG signature ($sig)"; exit 1; }
ihdr=$(head -c 24 "$f" | tail -c 12 | od -An -tx1 | tr -d ' \n')
# bytes 12..15 "IHDR", then width and height, 4 bytes each, big-endian
case $ihdr in
49484452*) ;;
*) echo "png_ok: $f: first chunk is not IHDR"; exit 1 ;;
esac
w=$((0x$(echo "$ihdr" | cut -c9-16)))
h=$((0x$(echo "$ihdr" | cut -c17-24)))
[ "$w" -gt 0 ] && [ "$h" -gt 0 ] || { echo "png_ok: $f: size ${w}x${h}"; exit 1; }
echo "png_ok: $f: ${w}x${h}"
