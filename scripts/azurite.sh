#!/usr/bin/env bash
# Run the project's pinned Azurite (blob service only) in the background, for people: demos,
# `dagster dev`, poking at the store by hand. Tests start their own; this is the same binary
# with the same flags (see emulator/azurite.py), bound to 127.0.0.1 only.
#
#   scripts/azurite.sh start [--port N] [--location DIR]   # prints the connection string
#   scripts/azurite.sh status [--location DIR]
#   scripts/azurite.sh stop [--location DIR]
#
# Defaults: port 10000 (Azurite's usual), location $TMPDIR/ehingest-azurite. The pid file, the
# port and Azurite's log live in the location. Installs nothing but `npm ci` when node_modules
# is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

ACCOUNT=devstoreaccount1
# Azurite's documented, public development key (not a secret).
KEY="Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

usage() {
  sed -n '6,8p' "$0" | sed 's/^#  */usage: /' >&2
  exit 2
}

cmd="${1:-}"
[ -n "$cmd" ] || usage
shift
port=10000
location="${TMPDIR:-/tmp}/ehingest-azurite"
while [ $# -gt 0 ]; do
  case "$1" in
    --port) port="${2:?--port needs a number}"; shift 2 ;;
    --location) location="${2:?--location needs a directory}"; shift 2 ;;
    *) echo "unknown option: $1" >&2; usage ;;
  esac
done
case "$port" in ''|*[!0-9]*) echo "--port: '$port' is not a port number" >&2; exit 2 ;; esac
pidfile="$location/azurite.pid"

conn_string() {
  echo "DefaultEndpointsProtocol=http;AccountName=$ACCOUNT;AccountKey=$KEY;BlobEndpoint=http://127.0.0.1:$1/$ACCOUNT;"
}

running_pid() {
  # The pid in the pid file, if that process is still alive.
  [ -f "$pidfile" ] || return 1
  local pid
  pid="$(cat "$pidfile")"
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

listening() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

start() {
  if pid="$(running_pid)"; then
    echo "Azurite already running (pid $pid, location $location)" >&2
    conn_string "$(cat "$location/azurite.port")"
    return 0
  fi
  if listening "$port"; then
    echo "port $port on 127.0.0.1 is already in use by something else; pick another with --port N" >&2
    exit 1
  fi
  if [ ! -x node_modules/.bin/azurite-blob ]; then
    command -v npm >/dev/null || { echo "npm not found: install Node 20 with npm" >&2; exit 1; }
    echo "== installing the pinned Azurite (npm ci)" >&2
    npm ci --no-audit --no-fund --silent >&2
  fi
  mkdir -p "$location"
  # setsid: its own session and process group, so `stop` can end it and its children at once
  # and a Ctrl-C in this terminal does not.
  setsid node_modules/.bin/azurite-blob \
    --blobHost 127.0.0.1 --blobPort "$port" --location "$location" \
    --skipApiVersionCheck --disableTelemetry --silent \
    >"$location/azurite.out" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$pidfile"
  echo "$port" >"$location/azurite.port"
  for _ in $(seq 1 150); do
    if listening "$port"; then
      echo "Azurite blob service on 127.0.0.1:$port (pid $pid, data and log in $location)" >&2
      echo "stop it with: scripts/azurite.sh stop --location $location" >&2
      conn_string "$port"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$pidfile"
      echo "Azurite exited at start; its log ($location/azurite.out):" >&2
      tail -n 20 "$location/azurite.out" >&2
      exit 1
    fi
    sleep 0.2
  done
  echo "Azurite did not listen on 127.0.0.1:$port within 30 s; stopping it" >&2
  stop
  exit 1
}

stop() {
  if ! pid="$(running_pid)"; then
    rm -f "$pidfile"
    echo "Azurite is not running (no live pid in $pidfile)" >&2
    return 0
  fi
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid"
  for _ in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
  echo "Azurite stopped (pid $pid)" >&2
}

status() {
  if pid="$(running_pid)"; then
    echo "running (pid $pid, port $(cat "$location/azurite.port"), location $location)"
  else
    echo "not running"
    return 1
  fi
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) usage ;;
esac
