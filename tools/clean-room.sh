#!/usr/bin/env bash
# tools/clean-room.sh: runs the README's two commands on a fresh Debian 12
# (debootstrap minbase) with a clone of this repository alone, as a newcomer
# would: nothing beside the clone, no packages but the base system, no caches.
# Needs root and the network to Debian's mirror and PyPI. Takes ~30 minutes on
# 2 cores (most of it pip compiling llama.cpp for llama-cpp-python).
#
# usage: sudo tools/clean-room.sh [DIR] [COMMIT]
#   DIR     where the root file system goes (default /var/tmp/sluice-clean-room;
#           kept afterwards, so a second run reuses it: delete it for a new one)
#   COMMIT  what to clone (default HEAD)
# Exit status: that of `tools/setup.sh && tools/test.sh` inside.
# The host's extra CA certificates (/usr/local/share/ca-certificates) are
# copied in, for networks that reach PyPI through an intercepting proxy.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
root=${1:-/var/tmp/sluice-clean-room}
commit=${2:-HEAD}
[ "$(id -u)" -eq 0 ] || { echo "clean-room: run as root (debootstrap, chroot, mount)" >&2; exit 2; }
command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null

if [ ! -x "$root/bin/bash" ]; then
  echo "clean-room: debootstrap bookworm (minbase) into $root"
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >/dev/null
fi
mounted=()
mnt() { mount "$@"; mounted+=("${@: -1}"); }
cleanup() {
  for ((i=${#mounted[@]}-1; i>=0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
mnt -t proc proc "$root/proc"
mnt -t sysfs sys "$root/sys"
mnt --bind /dev "$root/dev"
mnt -t devpts devpts "$root/dev/pts"
mnt -t tmpfs -o size=8g tmpfs "$root/dev/shm"
cp /etc/resolv.conf "$root/etc/"
# debootstrap writes no /etc/hosts, which every installed Debian has; without
# it "localhost" does not resolve (selenium reaches chromedriver there)
[ -e "$root/etc/hosts" ] || printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' > "$root/etc/hosts"
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$root/usr/local/share/ca-certificates"   # minbase has no ca-certificates package yet
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  chroot "$root" sh -c 'command -v update-ca-certificates >/dev/null && update-ca-certificates >/dev/null || true'
fi

rm -rf "$root/home/sluice"
git clone -q "$repo" "$root/home/sluice"
git -C "$root/home/sluice" checkout -q "$commit"
echo "clean-room: $(git -C "$root/home/sluice" log --oneline -1)"
chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root TERM=dumb /bin/bash -c 'cd /home/sluice && tools/setup.sh && tools/test.sh'
