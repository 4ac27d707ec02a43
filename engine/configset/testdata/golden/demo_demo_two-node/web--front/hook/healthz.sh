#!/bin/sh
# Runs on the node as app: the port listening is not enough, the app must answer.
set -eu
for i in $(seq 1 30); do
  curl -fsS -m 2 http://127.0.0.1:8080/healthz >/dev/null && exit 0
  sleep 1
done
echo "web front does not answer /healthz" >&2
exit 1
