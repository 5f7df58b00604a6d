#!/usr/bin/env bash
# The demo (README, first command). On a fresh machine with Python 3.11+, Java 17 and Node 20:
#   1. installs uv, the locked Python deps and the pinned Azurite (scripts/_bootstrap.sh);
#   2. starts Azurite (leases + checkpoints) and the project's Event Hubs emulator on 127.0.0.1;
#   3. sends sample events to a 4-partition hub with the real azure-eventhub SDK;
#   4. materializes the `eventhub_events` asset for every partition through Dagster
#      (`dagster asset materialize`, one run, the project's defs.yaml, a local Spark);
#   5. prints what landed: rows per partition, the output location, the checkpoint table;
#   6. stops everything it started (also on Ctrl-C or failure) and removes its temp dir.
#
#   bash scripts/demo.sh            # the above
#   bash scripts/demo.sh --ui       # ...then keep the services and `dagster dev` running on
#                                   # http://127.0.0.1:3000 until Ctrl-C, to look around
#   KEEP=1 bash scripts/demo.sh     # keep the temp dir (logs, sink, Dagster home) afterwards
set -euo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
UI=0
for arg in "$@"; do
  case "$arg" in
    --ui) UI=1 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "unknown option: $arg (try --help)" >&2; exit 2 ;;
  esac
done

step() { printf '\n== [%3ss] %s\n' "$(( $(date +%s) - START ))" "$*"; }

step "installing (uv, locked Python deps, pinned Azurite): quick when already there"
source scripts/_bootstrap.sh
PY="$PWD/.venv/bin/python"
BIN="$PWD/.venv/bin"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/ehingest-demo-XXXXXX")"
EMULATOR_PID=""
DAGSTER_PID=""
stop_group() {
  # Each service runs in its own session (setsid): signal the whole group, escalating
  # (dagster dev stops on SIGINT; a group that inherited an ignored SIGINT gets TERM, then KILL).
  local pid="$1" sig
  local tries=150  # the first signal gets 15 s to shut down cleanly, TERM and KILL 5 s each
  for sig in "$2" TERM KILL; do
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
    kill "-$sig" -- "-$pid" 2>/dev/null || kill "-$sig" "$pid" 2>/dev/null || true
    for _ in $(seq 1 "$tries"); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    tries=50
  done
}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  # Stopping the services must not depend on the terminal: piped through `tee`, Ctrl-C ends
  # the reader first and a write to the closed pipe would kill this script halfway.
  trap '' PIPE
  set +e
  echo
  echo "== stopping the services the demo started"
  [ -n "$DAGSTER_PID" ] && echo "   dagster dev (Ctrl-C / SIGINT to its process group)"
  stop_group "$DAGSTER_PID" INT
  stop_group "$EMULATOR_PID" TERM
  bash scripts/azurite.sh stop --location "$WORK/azurite" 2>&1 | sed 's/^/   /' || true
  if [ "${KEEP:-0}" = 1 ]; then
    echo "   kept $WORK (logs, sink, Dagster home)"
  else
    rm -rf "$WORK"
  fi
  echo "== demo finished in $(( $(date +%s) - START )) s (exit code $rc)"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

step "starting Azurite (blob service, 127.0.0.1)"
AZURE_STORAGE_CONNECTION_STRING="$(bash scripts/azurite.sh start --port "$(free_port)" --location "$WORK/azurite" 2>"$WORK/azurite-start.log")" || {
  cat "$WORK/azurite-start.log" >&2; exit 1; }
export AZURE_STORAGE_CONNECTION_STRING
sed 's/^/   /' "$WORK/azurite-start.log" | head -1

step "starting the Event Hubs emulator (hub 'demo', 4 partitions, 127.0.0.1)"
EH_PORT="$(free_port)"
setsid "$BIN/ehingest" emulator serve --port "$EH_PORT" --hub demo:4 \
  >"$WORK/emulator.out" 2>"$WORK/emulator.log" </dev/null &
EMULATOR_PID=$!
for _ in $(seq 1 150); do
  listening "$EH_PORT" && [ -s "$WORK/emulator.out" ] && break
  kill -0 "$EMULATOR_PID" 2>/dev/null || { echo "emulator exited:" >&2; cat "$WORK/emulator.log" >&2; exit 1; }
  sleep 0.2
done
listening "$EH_PORT" || { echo "emulator did not listen within 30 s" >&2; exit 1; }
EVENTHUB_CONNECTION_STRING="$(head -1 "$WORK/emulator.out")"
export EVENTHUB_CONNECTION_STRING
echo "   emulator on 127.0.0.1:$EH_PORT (pid $EMULATOR_PID)"

# What defs.yaml reads (dagster_project/defs/eventhub_events/defs.yaml).
export EVENTHUB_NAME=demo
export EHINGEST_CONTAINER=eventhub-state
export EHINGEST_SINK_PATH="$WORK/sink/eventhub_events"
export DAGSTER_HOME="$WORK/dagster_home"
mkdir -p "$DAGSTER_HOME"
# docs/dagster.yaml's settings: a run launched from the UI leaves Dagster's queue within 1 s.
{ printf 'telemetry:\n  enabled: false\n'; cat docs/dagster.yaml; } >"$DAGSTER_HOME/dagster.yaml"

step "sending sample events with the azure-eventhub SDK"
for pid in 0 1 2 3; do
  count=$(( (pid + 1) * 250 ))
  "$BIN/ehingest" emulator send --hub demo --partition "$pid" --count "$count" --size 200 \
    >"$WORK/send-$pid.log" 2>&1 || { cat "$WORK/send-$pid.log" >&2; exit 1; }
  echo "   partition $pid: $count events"
done

step "materializing eventhub_events for every partition through Dagster (one run, partitions 0...3)"
echo "   \$ dagster asset materialize -m dagster_eventhub_ingest.dagster_project.definitions --select eventhub_events --partition-range 0...3"
T_RUN=$(date +%s)
if ! "$BIN/dagster" asset materialize -m dagster_eventhub_ingest.dagster_project.definitions \
    --select eventhub_events --partition-range 0...3 >"$WORK/materialize.log" 2>&1; then
  echo "   the run failed; last lines of its log:" >&2
  tail -n 40 "$WORK/materialize.log" >&2
  exit 1
fi
# The run reports the lag check as measured at its end (dagster_project/assets.py).
check="$(grep -o "lag_within_threshold reported as measured at the end of this run: .*" \
  "$WORK/materialize.log" | head -1 | sed 's/^.*end of this run: //' || true)"
echo "   run succeeded in $(( $(date +%s) - T_RUN )) s:" \
  "$(grep -c ' ASSET_MATERIALIZATION - ' "$WORK/materialize.log") partition materializations," \
  "lag check: ${check:-not reported}"

step "what landed"
"$PY" -m dagster_eventhub_ingest.dagster_project.demo_report --asset eventhub_events --sink "$EHINGEST_SINK_PATH" \
  --hub demo --container "$EHINGEST_CONTAINER"

if [ "$UI" = 1 ]; then
  UI_PORT=3000
  listening "$UI_PORT" && UI_PORT="$(free_port)"
  step "starting dagster dev on http://127.0.0.1:$UI_PORT (Ctrl-C stops it and the services)"
  # Job control (set -m) gives dagster dev its own process group AND leaves SIGINT at its
  # default: a background job of a non-interactive script (or one started by setsid from it)
  # inherits SIGINT ignored, so dagster dev would sit out Ctrl-C until killed.
  set -m
  "$BIN/dagster" dev -w workspace.yaml -h 127.0.0.1 -p "$UI_PORT" \
    >"$WORK/dagster-dev.log" 2>&1 </dev/null &
  DAGSTER_PID=$!
  set +m
  for _ in $(seq 1 300); do
    listening "$UI_PORT" && break
    kill -0 "$DAGSTER_PID" 2>/dev/null || { echo "dagster dev exited:" >&2; tail -n 20 "$WORK/dagster-dev.log" >&2; exit 1; }
    sleep 0.2
  done
  echo "   open http://127.0.0.1:$UI_PORT/assets/eventhub_events to see partitions, metadata and the lag check"
  wait "$DAGSTER_PID" || true
fi
