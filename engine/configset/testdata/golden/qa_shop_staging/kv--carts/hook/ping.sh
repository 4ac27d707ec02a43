#!/bin/sh
# Runs on the node as app once the unit is active and the port listens.
set -eu
for i in $(seq 1 30); do
  if printf 'AUTH %s\r\nPING\r\n' 'example-kv-password' | timeout 2 nc -q1 127.0.0.1 6380 | grep -q PONG; then
    exit 0
  fi
  sleep 1
done
echo "kv carts does not answer PING" >&2
exit 1
