#!/usr/bin/env bash
# The caphost demo (run it with `make demo`).
#
# Today caphost's runtime is the deliverable, so the demo shows it working
# against a real Redis: it validates a configuration, probes the server
# (auth, topology, version, programs, an ephemeral write/read, eviction
# policy), lists the program catalog, verifies it in evalsha-managed mode,
# deploys it as a Redis Function library and verifies that too.
#
# It starts a private redis-server on a free loopback port (ACL on, default
# user off) unless CAPHOST_REDIS_ADDR points at one you run, and stops
# everything it started when it exits.
set -euo pipefail
BIN=${1:-build/caphost}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/caphost-demo.XXXXXX)
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

export CAPHOST_DEMO_APP_PASS="app-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
export CAPHOST_DEMO_ADMIN_PASS="admin-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
export CAPHOST_DEMO_KEY_V1="$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')"

if [ -n "${CAPHOST_REDIS_ADDR:-}" ]; then
  addr=$CAPHOST_REDIS_ADDR
  say "using your Redis at $addr (CAPHOST_REDIS_ADDR); it must accept the demo's ACL users or default user"
else
  command -v redis-server >/dev/null || { echo "redis-server missing: run 'make ensure-redis'"; exit 1; }
  cat >"$work/users.acl" <<ACL
user default off
user demo-app on >${CAPHOST_DEMO_APP_PASS} ~ca:demo:dev:* resetchannels -@all +@connection +get +getrange +set +del +unlink +exists +pttl +pexpire +mget +time +evalsha +evalsha_ro +script|load +script|exists +fcall +fcall_ro
user demo-admin on >${CAPHOST_DEMO_ADMIN_PASS} ~* &* +@all
ACL
  for attempt in 1 2 3 4 5; do
    port=$(( 20000 + RANDOM % 20000 ))
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
      --aclfile "$work/users.acl" --maxmemory 64mb --maxmemory-policy noeviction \
      --logfile "$work/redis.log" &
    pid=$!
    for _ in $(seq 1 50); do
      if redis-cli -p "$port" --user demo-admin --pass "$CAPHOST_DEMO_ADMIN_PASS" --no-auth-warning ping 2>/dev/null | grep -q PONG; then break 2; fi
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=""
  done
  [ -n "$pid" ] || { echo "could not start redis-server"; cat "$work/redis.log" 2>/dev/null | tail -5; exit 1; }
  addr=127.0.0.1:$port
  say "started a private redis-server $(redis-server --version | awk '{print $3}') at $addr (ACL: default user off; users demo-app, demo-admin)"
fi

for mode in evalsha-managed functions-provisioned; do
  sed -e "s/@ADDR@/$addr/" -e "s/@MODE@/$mode/" "$here/caphost.yaml" >"$work/caphost-$mode.yaml"
done
cfg=$work/caphost-evalsha-managed.yaml
fcfg=$work/caphost-functions-provisioned.yaml

say "caphost check --config caphost.yaml   (validation only: every problem at once)"
"$BIN" check --config "$cfg" --all-roles

say "caphost check --probe   (auth, topology, version, programs, ephemeral write/read, eviction policy)"
"$BIN" check --config "$cfg" --all-roles --probe

say "caphost programs list"
"$BIN" programs list --config "$cfg"

say "caphost programs verify   (evalsha-managed: scripts are loaded lazily, so missing ones are listed, not fatal)"
"$BIN" programs verify --config "$cfg" || true

say "caphost programs deploy   (functions-provisioned: FUNCTION LOAD REPLACE on the admin lane)"
"$BIN" programs deploy --config "$fcfg"

say "caphost programs verify   (functions-provisioned: the library version and digest must match exactly)"
"$BIN" programs verify --config "$fcfg"

say "caphost check --probe   (functions-provisioned)"
"$BIN" check --config "$fcfg" --all-roles --probe

say "done: stopped everything the demo started"
