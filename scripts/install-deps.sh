#!/usr/bin/env bash
# Installs the Debian packages the tests and the VM-backed end-to-end tests need. Idempotent: only
# missing packages are installed, and apt-get update runs only when something is missing.
set -euo pipefail

packages=(
  git                 # Gitea shells out to git
  openssh-client      # ssh-keygen and manual debugging of test servers
  openssh-server      # a real sshd on loopback for the engine's SSH tests (not run as a service)
  docker-registry     # a login-protected container registry for the VM tests and DEMO_NODES=full
  qemu-system-x86     # VMs behind the hcloudsim VM backend
  qemu-utils
  debootstrap
  cloud-image-utils   # cloud-localds (NoCloud seeds)
  genisoimage
  e2fsprogs
  vde2                # vde_switch: the private network between VMs, a hub for any number of them
  netcat-openbsd      # nc: QEMU runs it per guest connection to reach the test registry (guestfwd cmd:)
  prometheus          # promtool: CI checks deploy/alerts.yml
  systemd             # systemd-analyze: CI verifies deploy/stands-reconciler.service
  python3-mako        # the Stands Engine's template engine: migrate's tests render old and new alike
  chromium            # make demo-check renders the plan comment and STATUS.md as reviewers see them
  fonts-dejavu-core   # … with fonts, for its screenshots
  fonts-noto-color-emoji  # … and the plan comment's emoji
  postgresql          # initdb and postgres: the tests start their own clusters (the postgres:// backend, leases)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
# The registry and sshd packages enable system services; tests start their own on ephemeral ports.
for svc in docker-registry ssh prometheus postgresql; do
  if systemctl is-enabled $svc >/dev/null 2>&1; then
    $sudo systemctl disable --now $svc >/dev/null 2>&1 || true
  fi
done
