#!/bin/bash
## Runs on the node as the app user once the unit is active: the store must answer PING after AUTH.
## (No <& here: Mako reads it as its call syntax and drops the <.)
set -u
for i in $(seq 1 30); do
  if exec 3<>/dev/tcp/127.0.0.1/${preferences['port']}; then
    printf 'AUTH %s\r\nPING\r\nQUIT\r\n' '${preferences['password']}' >&3
    reply=$(timeout 5 cat /dev/fd/3)
    exec 3>&-
    case $reply in *PONG*) exit 0 ;; esac
  fi 2>/dev/null
  sleep 1
done
echo "kv ${instance} does not answer PING" >&2
exit 1
