#!/usr/bin/env bash
# Builds what the kernel-Homa peer VMs need, into a work directory:
#   homa.ko and the module's util/ programs (static), built from a copy of
#   the module source against the installed Debian 6.12 cloud headers, and an
#   initramfs (busybox-static, virtio_net and its failover modules, homa.ko,
#   the programs, libhoma's own kernel-side helper khoma_peer, libhoma's
#   hx_lpeer when a libhoma build is there, an /init).
# Rebuilds only what is missing or older than its inputs.
#
#   HOMA_MODULE_SRC  module source tree (default: ../shared/third_party/HomaModule)
#   HX_WORK          work directory (default: build/interop)
#   HX_KVER          kernel release (default: newest 6.12 cloud image with headers)
#
# Exit status 77 (with the reason on stderr) when a prerequisite is missing.
set -euo pipefail

HX_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/interop/hx-lib.sh
source "$HX_DIR/hx-lib.sh"

hx_resolve_env || exit $?
mkdir -p "$HX_WORK"
exec 9>"$HX_WORK/.build.lock"
flock 9

stamp_src=$(find "$HOMA_MODULE_SRC" -maxdepth 2 -type f \( -name '*.[ch]' -o -name '*.cc' -o -name Makefile \) \
    -newer "$HX_WORK/modsrc.stamp" 2>/dev/null | head -1 || true)
if [[ ! -f $HX_WORK/modsrc.stamp || -n $stamp_src || ! -f $HX_WORK/mod/homa.ko ]]; then
    echo "hx-build: building homa.ko from $HOMA_MODULE_SRC against $HX_KDIR" >&2
    rm -rf "$HX_WORK/mod"
    cp -r "$HOMA_MODULE_SRC" "$HX_WORK/mod"
    chmod -R u+w "$HX_WORK/mod"
    make -s -C "$HX_WORK/mod" -j"${HX_JOBS:-2}" KDIR="$HX_KDIR" >"$HX_WORK/kbuild.log" 2>&1 ||
        { tail -20 "$HX_WORK/kbuild.log" >&2; echo "hx-build: homa.ko build failed" >&2; exit 1; }
    # The util programs run in a busybox initramfs: link them statically.
    make -s -C "$HX_WORK/mod/util" -j"${HX_JOBS:-2}" \
        CFLAGS="-Wall -fno-strict-aliasing -O2 -I.. -static" cp_node homa_test server \
        >"$HX_WORK/ubuild.log" 2>&1 ||
        { tail -20 "$HX_WORK/ubuild.log" >&2; echo "hx-build: util build failed" >&2; exit 1; }
    touch "$HX_WORK/modsrc.stamp"
fi

# libhoma's own kernel-side peer program (talks to the module's socket API).
if [[ ! -x $HX_WORK/khoma_peer || $HX_DIR/khoma_peer.c -nt $HX_WORK/khoma_peer ]]; then
    gcc -std=gnu11 -O2 -Wall -Wextra -Werror -static -I"$HX_WORK/mod" \
        -o "$HX_WORK/khoma_peer" "$HX_DIR/khoma_peer.c"
fi

# libhoma's peer, static, for libhoma runs inside the VMs (bench/interop/hx-bench.sh):
# only when a libhoma build is there (HX_LIBHOMA_A, default build/src/libhoma.a).
lib=${HX_LIBHOMA_A:-$HX_ROOT/build/src/libhoma.a}
if [[ -f $lib && ( ! -x $HX_WORK/hx_lpeer || $lib -nt $HX_WORK/hx_lpeer ||
      $HX_ROOT/tests/interop/hx_lpeer.c -nt $HX_WORK/hx_lpeer ) ]]; then
    gcc -std=gnu11 -O2 -D_GNU_SOURCE -static -I"$HX_ROOT/include" -o "$HX_WORK/hx_lpeer" \
        "$HX_ROOT/tests/interop/hx_lpeer.c" "$lib" -lpthread -lm 2>"$HX_WORK/lpeer-build.log" ||
        { cat "$HX_WORK/lpeer-build.log" >&2; rm -f "$HX_WORK/hx_lpeer"; }
fi

# The initramfs.
root=$HX_WORK/initramfs
if [[ ! -f $HX_WORK/initrd.cpio.gz || $HX_DIR/hx-init.sh -nt $HX_WORK/initrd.cpio.gz ||
      $HX_WORK/modsrc.stamp -nt $HX_WORK/initrd.cpio.gz || $HX_WORK/khoma_peer -nt $HX_WORK/initrd.cpio.gz ||
      ( -x $HX_WORK/hx_lpeer && $HX_WORK/hx_lpeer -nt $HX_WORK/initrd.cpio.gz ) ]]; then
    rm -rf "$root"
    mkdir -p "$root"/{bin,sbin,proc,sys,dev,tmp,mods,root}
    cp "$HX_BUSYBOX" "$root/bin/busybox"
    for a in $("$HX_BUSYBOX" --list); do
        [[ $a == busybox ]] || ln -sf busybox "$root/bin/$a"
    done
    moddir=/lib/modules/$HX_KVER/kernel
    for m in net/core/failover drivers/net/net_failover drivers/net/virtio_net; do
        f=$(ls "$moddir/$m".ko* 2>/dev/null | head -1)
        [[ -n $f ]] || { echo "hx-build: $moddir/$m.ko missing" >&2; exit 77; }
        case $f in
            *.xz) xz -dc "$f" >"$root/mods/$(basename "$m").ko" ;;
            *.zst) zstd -dcq "$f" >"$root/mods/$(basename "$m").ko" ;;
            *) cp "$f" "$root/mods/" ;;
        esac
    done
    strip --strip-debug -o "$root/mods/homa.ko" "$HX_WORK/mod/homa.ko"
    for p in cp_node homa_test server; do
        strip -o "$root/bin/$p" "$HX_WORK/mod/util/$p"
    done
    strip -o "$root/bin/khoma_peer" "$HX_WORK/khoma_peer"
    [[ -x $HX_WORK/hx_lpeer ]] && strip -o "$root/bin/hx_lpeer" "$HX_WORK/hx_lpeer"
    cp "$HX_DIR/hx-init.sh" "$root/init"
    chmod 755 "$root/init"
    (cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$HX_WORK/initrd.cpio.gz.tmp"
    mv "$HX_WORK/initrd.cpio.gz.tmp" "$HX_WORK/initrd.cpio.gz"
fi
echo "hx-build: ready in $HX_WORK (kernel $HX_KVER)" >&2
