#!/usr/bin/env bash
# Installs stands-reconciler as a systemd service, idempotently:
#   sudo deploy/install.sh BINARY PULUMI_ROOT
# BINARY is the stands-reconciler binary (make builds bin/stands-reconciler); PULUMI_ROOT the Pulumi CLI
# laid out as <root>/bin/pulumi (make tools builds bin/pulumi: give the folder above it). It creates the
# system user stands, every path the unit names, installs both binaries and the unit, and an
# environment file from the example when there is none. Credentials are left to the operator: put
# each secret in /etc/stands-reconciler/credentials/<name> (mode 0600, root) as the unit lists them.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BINARY PULUMI_ROOT" >&2; exit 2; }
binary=$1 pulumi_root=$2
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$binary" ] || { echo "install: $binary is not an executable" >&2; exit 1; }
[ -x "$pulumi_root/bin/pulumi" ] || { echo "install: no Pulumi CLI at $pulumi_root/bin/pulumi" >&2; exit 1; }

if ! id stands >/dev/null 2>&1; then
  useradd --system --home-dir /var/lib/stands-reconciler --no-create-home --shell /usr/sbin/nologin stands
fi
install -d -m 0755 /opt/stands-reconciler/bin /opt/stands-reconciler/pulumi/bin /etc/stands-reconciler
install -d -m 0700 -o root -g root /etc/stands-reconciler/credentials
install -d -m 0700 -o stands -g stands /var/lib/stands-reconciler
install -m 0755 "$binary" /opt/stands-reconciler/bin/stands-reconciler
# The CLI and its bundled plugins and language hosts sit together in <root>/bin.
cp -a "$pulumi_root/bin/." /opt/stands-reconciler/pulumi/bin/
if [ ! -e /etc/stands-reconciler/stands-reconciler.env ]; then
  install -m 0644 "$here/stands-reconciler.env.example" /etc/stands-reconciler/stands-reconciler.env
fi
for cred in hcloud-token passphrase git-token webhook-secret vault-secret-id git-ssh-key db-password; do
  # LoadCredential= fails the start on a missing file: a credential you do not use (a git token
  # for a local repository, a secret id without Vault) stays an empty file.
  [ -e "/etc/stands-reconciler/credentials/$cred" ] || install -m 0600 /dev/null "/etc/stands-reconciler/credentials/$cred"
done
install -m 0644 "$here/stands-reconciler.service" /etc/systemd/system/stands-reconciler.service
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload
fi
echo "install: done; put the secrets in /etc/stands-reconciler/credentials, edit /etc/stands-reconciler/stands-reconciler.env,"
echo "         then: systemctl enable --now stands-reconciler"
