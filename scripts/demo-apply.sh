#!/usr/bin/env bash
# The engine on the example repository: a simulated Hetzner project (hcloudsim, with the network
# and SSH key the examples expect), the real Pulumi CLI, and the two-node stand previewed, applied,
# applied again (a no-op) and destroyed, servers only. Everything stays under _apply/ (not _demo/, which is make demo's).
set -euo pipefail
cd "$(dirname "$0")/.."
out=_apply
rm -rf "$out"
mkdir -p "$out"
bin/hcloudsim -listen 127.0.0.1:0 -example-project -state "$out/hcloud.json" -action-delay 300ms \
  > "$out/endpoint" 2> "$out/hcloudsim.log" &
sim=$!
trap 'kill $sim 2>/dev/null || true' EXIT
for _ in $(seq 50); do [ -s "$out/endpoint" ] && break; sleep 0.1; done
export STANDS_CLOUD_ENDPOINT=$(head -n1 "$out/endpoint")
# The simulated servers are not machines here: servers-only mode (make e2e runs the full mode on VMs).
# The one-shot commands keep state only where they are told: here a folder, chosen.
export HCLOUD_TOKEN=test-token STANDS_PASSPHRASE=demo-passphrase STANDS_STATE_DIR="$out/state" STANDS_OWNER=demo STANDS_NODES=skip \
  STANDS_BACKEND_URL="file://$PWD/$out/state/pulumi/demo"
set -a
. examples/demo.env
set +a
stand=examples/stands-repo/stands/two-node
echo "# hcloudsim at $STANDS_CLOUD_ENDPOINT" >&2
echo "# preview" >&2;              bin/stands-reconciler preview "$stand" 2> "$out/preview.log"
echo "# apply" >&2;                bin/stands-reconciler apply --output-dir "$out/connections" "$stand" 2> "$out/apply.log"
echo "# apply again (no-op)" >&2;  bin/stands-reconciler apply "$stand" 2> "$out/apply-again.log"
echo "# destroy" >&2;              bin/stands-reconciler destroy demo_demo_two-node 2> "$out/destroy.log"
echo "# logs in $out/, the full connection record in $out/connections/ (mode 0600)" >&2
