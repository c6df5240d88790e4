#!/usr/bin/env bash
# Installs redis-server from Debian's packages without starting the packaged
# service: caphost's tests and demo start private servers on free ports.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" != 0 ]; then
  echo "redis-server is missing; install it with: sudo apt-get install -y redis-server" >&2
  exit 1
fi
echo "installing redis-server (apt-get)…"
# policy-rc.d exit 101 = "do not start services from maintainer scripts".
cleanup() { rm -f /usr/sbin/policy-rc.d; }
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  trap cleanup EXIT
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq redis-server >/dev/null
command -v redis-server
