#!/bin/bash
# Runs on the node as app once the unit is active and the port listens: the store must
# answer PING after AUTH (bash's /dev/tcp: nothing to install on the node).
set -u
for i in $(seq 1 30); do
  if exec 3<>/dev/tcp/127.0.0.1/6379; then
    printf 'AUTH %s\r\nPING\r\nQUIT\r\n' 'example-kv-password' >&3
    reply=$(timeout 5 cat <&3)
    exec 3<&-
    case $reply in *PONG*) exit 0 ;; esac
  fi 2>/dev/null
  sleep 1
done
echo "kv sessions does not answer PING" >&2
exit 1
