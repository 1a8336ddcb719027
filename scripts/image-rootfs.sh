#!/usr/bin/env bash
# Fills DIR with the build context of the container image (Containerfile):
# DIR/rootfs.tar holds the crowdtrain BINARY as /usr/bin/crowdtrain, every
# shared library it loads (as ldd lists them: a cgo build needs glibc and
# its loader, and even the cgo-free one is linked against them for
# purego), the CA roots ACME and --ca-file-less TLS clients need, MNIST
# from data/mnist (`make data`), and the writable state directory. No base
# image is pulled: the image is built FROM scratch out of this machine's
# files, so it runs where this machine's glibc runs. The files are root's
# but for the state directory, DIR/state.tar, which belongs to the user
# the image runs as (65534, nobody): tar archives carry ownership into
# the image, which COPY of a directory does not.
#
#   scripts/image-rootfs.sh bin/crowdtrain build/image
set -euo pipefail
bin=${1:?usage: $0 BINARY DIR}
out=${2:?usage: $0 BINARY DIR}
cd "$(dirname "$0")/.."

[ -x "$bin" ] || { echo "$0: $bin is not an executable: run make build first" >&2; exit 1; }
[ -f data/mnist/train-images-idx3-ubyte.gz ] || { echo "$0: no MNIST in data/mnist: run make data first" >&2; exit 1; }
root=$out/rootfs
rm -rf "$out"
mkdir -p "$root/usr/bin" "$root/usr/share/crowdtrain/mnist" "$root/etc/ssl/certs" "$root/tmp" "$out/state/var/lib/crowdtrain"
chmod 1777 "$root/tmp"
cp "$bin" "$root/usr/bin/crowdtrain"
cp data/mnist/*-ubyte.gz "$root/usr/share/crowdtrain/mnist/"

# The libraries at the paths the loader looks in; the loader itself at
# the path the binary names as its interpreter.
libs=$(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
[ -n "$libs" ] || { echo "$0: ldd lists no libraries for $bin; a static binary needs none, but this build is not one" >&2; exit 1; }
for lib in $libs; do
	mkdir -p "$root$(dirname "$lib")"
	cp -L "$lib" "$root$lib"
done

ca=/etc/ssl/certs/ca-certificates.crt
[ -f "$ca" ] || { echo "$0: no CA roots at $ca: install Debian's ca-certificates" >&2; exit 1; }
cp "$ca" "$root$ca"
# Names for the nobody user the image runs as (logs and os/user).
printf 'root:x:0:0:root:/root:/nonexistent\nnobody:x:65534:65534:nobody:/var/lib/crowdtrain:/nonexistent\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
chmod 700 "$out/state/var/lib/crowdtrain"
tar -C "$root" --numeric-owner --owner=0 --group=0 -cf "$out/rootfs.tar" .
tar -C "$out/state" --numeric-owner --owner=65534 --group=65534 -cf "$out/state.tar" .
rm -rf "$root" "$out/state"
cp Containerfile "$out/Containerfile"
echo "image context in $out: $(du -sh "$out/rootfs.tar" | cut -f1) of files"
