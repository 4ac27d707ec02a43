#!/bin/bash
# vm-image.sh — build, once, the Debian 12 image hcloudsim's VM backend boots as "cloud servers":
# systemd, cloud-init (NoCloud), sshd, rootless Podman under a lingering user's systemd, firewalld.
#
# Output (cached outside the repository, reused while the recipe below is unchanged):
#   $STANDS_VM_DIR/img/base.qcow2, vmlinuz, initrd.img, recipe.sha256
# Default STANDS_VM_DIR: /var/tmp/stands-vm. Needs root (debootstrap, chroot) and Debian's mirror.
# Measured on 2 cores: ~3 min cold, 0 s warm.
set -euo pipefail

DIR=${STANDS_VM_DIR:-/var/tmp/stands-vm}
IMG=$DIR/img
MIRROR=${STANDS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SELF=$(readlink -f "$0")
RECIPE=$(sha256sum "$SELF" | cut -d' ' -f1)

if [ -f "$IMG/base.qcow2" ] && [ "$(cat "$IMG/recipe.sha256" 2>/dev/null)" = "$RECIPE" ]; then
  echo "vm-image: $IMG/base.qcow2 is up to date"
  exit 0
fi
[ "$(id -u)" = 0 ] || { echo "vm-image: needs root (debootstrap and chroot)" >&2; exit 1; }
for c in debootstrap mkfs.ext4 qemu-img; do
  command -v $c >/dev/null || { echo "vm-image: $c is missing: run scripts/install-deps.sh" >&2; exit 1; }
done

mkdir -p "$DIR"
exec 9>"$DIR/.build.lock"
flock 9 # one build at a time; a second caller waits, then finds the image built
if [ -f "$IMG/base.qcow2" ] && [ "$(cat "$IMG/recipe.sha256" 2>/dev/null)" = "$RECIPE" ]; then exit 0; fi

T0=$(date +%s)
R=$DIR/rootfs
CACHE=$DIR/debcache
cleanup() { for m in var/cache/apt/archives dev/pts dev sys proc; do umount "$R/$m" 2>/dev/null || true; done; }
trap cleanup EXIT
cleanup
rm -rf "$R"; mkdir -p "$R" "$CACHE/partial"

# Pitfall: debootstrap --include cannot resolve virtual packages (podman, cloud-init): minbase first,
# then apt inside the chroot.
nice debootstrap --variant=minbase --cache-dir="$CACHE" bookworm "$R" "$MIRROR"
printf '%s\n' "deb $MIRROR bookworm main" "deb $MIRROR bookworm-updates main" \
  "deb ${MIRROR%/debian}/debian-security bookworm-security main" > "$R/etc/apt/sources.list"
mount -t proc proc "$R/proc"; mount -t sysfs sys "$R/sys"; mount --bind /dev "$R/dev"; mount --bind /dev/pts "$R/dev/pts"
mount --bind "$CACHE" "$R/var/cache/apt/archives"
printf '#!/bin/sh\nexit 101\n' > "$R/usr/sbin/policy-rc.d"; chmod +x "$R/usr/sbin/policy-rc.d"
chroot "$R" apt-get update
PKGS="systemd-sysv linux-image-cloud-amd64 initramfs-tools openssh-server cloud-init podman uidmap slirp4netns
 fuse-overlayfs catatonit containernetworking-plugins firewalld iproute2 iputils-ping sudo dbus dbus-user-session
 libpam-systemd systemd-container ifupdown isc-dhcp-client curl ca-certificates netbase procps less"
DEBIAN_FRONTEND=noninteractive nice chroot "$R" apt-get install -y --no-install-recommends $PKGS

echo stands-vm > "$R/etc/hostname"; printf '127.0.0.1 localhost\n' > "$R/etc/hosts"
printf '/dev/vda / ext4 defaults,errors=remount-ro 0 1\n' > "$R/etc/fstab"
# Pitfall: cloud-init's locale module fails on minbase.
printf 'datasource_list: [ NoCloud, None ]\nlocale: C.UTF-8\n' > "$R/etc/cloud/cloud.cfg.d/90-stands-vm.cfg"
# Clones: cloud-init makes a machine id and host keys per server.
: > "$R/etc/machine-id"; rm -f "$R/var/lib/dbus/machine-id" "$R"/etc/ssh/ssh_host_*
printf 'auto lo\niface lo inet loopback\nsource /etc/network/interfaces.d/*\n' > "$R/etc/network/interfaces"
# Pitfall: without these files useradd allocates no subordinate ids and rootless Podman fails.
touch "$R/etc/subuid" "$R/etc/subgid"
# Pitfall: rootless Podman falls back to vfs without a storage configuration.
mkdir -p "$R/etc/containers"
printf '[storage]\ndriver = "overlay"\n' > "$R/etc/containers/storage.conf"
# Pitfall: firewalld enabled at boot + cloud-init + ifupdown make an ordering cycle (firewalld#414,
# cloud-init#6502); the example cloud-init template enables it from runcmd with the ordering fixed.
for u in firewalld.service podman.service podman.socket podman-auto-update.timer podman-auto-update.service \
         podman-restart.service e2scrub_reap.service dpkg-db-backup.timer apt-daily.timer apt-daily-upgrade.timer \
         man-db.timer e2scrub_all.timer fstrim.timer; do chroot "$R" systemctl disable $u 2>/dev/null || true; done
# Pitfall: under emulation units start 20-40x slower than on hardware.
mkdir -p "$R/etc/systemd/user.conf.d" "$R/etc/systemd/system.conf.d"
printf '[Manager]\nDefaultTimeoutStartSec=600s\n' | tee "$R/etc/systemd/user.conf.d/90-slow.conf" > "$R/etc/systemd/system.conf.d/90-slow.conf"
rm -f "$R/usr/sbin/policy-rc.d"; chroot "$R" apt-get clean; rm -rf "$R"/var/lib/apt/lists/*
cleanup

mkdir -p "$IMG"
cp "$R"/boot/vmlinuz-* "$IMG/vmlinuz.new"; cp "$R"/boot/initrd.img-* "$IMG/initrd.img.new"
rm -f "$IMG/base.raw"; truncate -s 4G "$IMG/base.raw"
nice mkfs.ext4 -q -F -L root -d "$R" "$IMG/base.raw" # -d keeps file capabilities and setuid bits
nice qemu-img convert -O qcow2 "$IMG/base.raw" "$IMG/base.qcow2.new"
rm -f "$IMG/base.raw"
mv "$IMG/vmlinuz.new" "$IMG/vmlinuz"; mv "$IMG/initrd.img.new" "$IMG/initrd.img"; mv "$IMG/base.qcow2.new" "$IMG/base.qcow2"
echo "$RECIPE" > "$IMG/recipe.sha256"
rm -rf "$R"
echo "vm-image: built $IMG/base.qcow2 in $(( $(date +%s) - T0 )) s"
