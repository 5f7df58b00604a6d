#!/usr/bin/env bash
# The project's test command (README, .ci/run): installs what it needs from the lock files, then
# runs lint, format check, the type checker and every test tier. Extra args go to pytest, e.g.
#   bash scripts/test.sh -m "not slow"      bash scripts/test.sh tests/integration/test_store_contract.py
#
# Tiers: the main pytest run (unit, integration, spark, slow) runs in the foreground. Every
# scripts/tiers/<name>.sh (cluster, Spark Connect, browser, Airflow, SDK conformance, the native
# step under sanitizers...) runs beside it in the background, its output in
# $TIER_LOGS/<name>.log, because those tiers wait on services more than they compute. They run only for the full command (no pytest args) or when
# TIERS="name1 name2" picks some; TIERS=none skips them. The exit code is non-zero if any part
# failed; each tier's tail is printed when it fails.
set -euo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
since() { echo "$(( $(date +%s) - $1 ))s"; }
source scripts/_bootstrap.sh
echo "== bootstrap done in $(since "$T0")"
# Test JVMs live for seconds to minutes and CI is CPU-bound on 2 cores: the C1 compiler alone
# and the serial collector cut a local Spark session's CPU by ~40% (a session, a 200k-row write
# and a read: 23-25 s -> 14-16 s of CPU). Drivers and Connect servers (spark-submit), cluster
# daemons and, through emulator/spark_cluster.py, executors get them; benchmarks do not.
export EHINGEST_TEST_JAVA_OPTS="${EHINGEST_TEST_JAVA_OPTS--XX:TieredStopAtLevel=1 -XX:+UseSerialGC}"
export SPARK_SUBMIT_OPTS="${SPARK_SUBMIT_OPTS:-$EHINGEST_TEST_JAVA_OPTS}"
export SPARK_DAEMON_JAVA_OPTS="${SPARK_DAEMON_JAVA_OPTS:-$EHINGEST_TEST_JAVA_OPTS}"

# Local Spark JVMs start from a class-data archive (resources/spark/jvm_archive.py) once it exists.
# The tests only ever map it: it is written once, by `ehingest spark-archive` beside the lint
# (below), not by every short-lived test JVM at its exit (~20 s each until one had written it).
export EHINGEST_JVM_ARCHIVE="${EHINGEST_JVM_ARCHIVE:-use}"

if [ $# -eq 0 ]; then TIERS=${TIERS:-all}; else TIERS=${TIERS:-none}; fi
# Logs (and the browser tier's screenshots) stay when something failed or TIER_LOGS was given;
# a temp dir of a run that passed is removed.
OWN_TIER_LOGS=
if [ -z "${TIER_LOGS:-}" ]; then TIER_LOGS=$(mktemp -d -t ehingest-tiers.XXXXXX); OWN_TIER_LOGS=1; fi
export TIER_LOGS
declare -A tier_pid=() tier_start=()
# Longest tiers first (they all start at once; this only orders their start-up bursts), then any
# other scripts/tiers/*.sh in name order.
TIER_ORDER="cluster browser sdk_conformance airflow wheel"
tier_files() {
  local n f
  for n in $TIER_ORDER; do [ -e "scripts/tiers/$n.sh" ] && echo "scripts/tiers/$n.sh"; done
  for f in scripts/tiers/*.sh; do
    [ -e "$f" ] || continue
    [[ " $TIER_ORDER " == *" $(basename "$f" .sh) "* ]] || echo "$f"
  done
}
# Runs one tier and writes its end time: the summary below is printed after the main pytest run,
# which may finish long after the tier did. TERM/INT reach the tier's script.
run_tier() {  # name command...
  local name=$1 child trc=0
  shift
  "$@" >"$TIER_LOGS/$name.log" 2>&1 &
  child=$!
  trap 'kill -TERM "$child" 2>/dev/null' TERM INT
  wait "$child" || trc=$?
  while kill -0 "$child" 2>/dev/null; do trc=0; wait "$child" || trc=$?; done
  date +%s >"$TIER_LOGS/$name.end"
  return "$trc"
}
start_tier() {  # name command...
  echo "== $1 (background, log: $TIER_LOGS/$1.log)"
  tier_start[$1]=$(date +%s)
  run_tier "$@" &
  tier_pid[$1]=$!
}
if [ "$TIERS" != none ]; then
  for f in $(tier_files); do
    name=$(basename "$f" .sh)
    if [ "$TIERS" != all ] && [[ " $TIERS " != *" $name "* ]]; then continue; fi
    start_tier "$name" bash "$f"
  done
fi
stop_tiers() { for p in "${tier_pid[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; }
trap stop_tiers INT TERM EXIT

# Lint and format fail fast; the type checker (minutes on a cold cache) runs beside the tests
# like a tier, so it is not on the main run's critical path.
# An archive that cannot be written only makes the test JVMs slower: never a failure.
if [ "$EHINGEST_JVM_ARCHIVE" = use ]; then
  start_tier spark-archive bash -c 'uv run --frozen ehingest spark-archive ||
    echo "warning: no class-data archive (exit $?); test JVMs start without one, only slower"'
fi
echo "== ruff"; uv run --frozen ruff check .
uv run --frozen ruff format --check .
start_tier mypy uv run --frozen mypy

# The full main run is split over $PYTEST_WORKERS pytest-xdist workers (each with its own
# Azurite, emulator and SparkSession; tests isolate by uuid-named hubs, containers and tmp
# dirs): many of its tests wait on subprocesses, Spark jobs and services, and once the tiers end
# one serial pytest leaves a core idle; 3 workers keep both cores busy while one waits.
# PYTEST_WORKERS=0 runs it serially. Narrowed runs (args) stay serial unless they pass -n.
XDIST=()
if [ $# -eq 0 ] && [ "${PYTEST_WORKERS:-3}" != 0 ]; then
  XDIST=(-n "${PYTEST_WORKERS:-3}" --dist worksteal)
fi
echo "== pytest ${XDIST[*]}"
T=$(date +%s)
rc=0
uv run --frozen pytest "${XDIST[@]}" "$@" || rc=$?
echo "== pytest (main run) exit $rc in $(since "$T")"

for name in "${!tier_pid[@]}"; do
  trc=0; wait "${tier_pid[$name]}" || trc=$?
  end=$(cat "$TIER_LOGS/$name.end" 2>/dev/null || date +%s)
  secs=$(( end - ${tier_start[$name]} ))
  if [ "$trc" -eq 0 ]; then
    echo "== $name: passed in ${secs}s ($(grep -E '[0-9]+ (passed|failed)|^Success|^wrote |^up to date|^another process|^warning: no class' "$TIER_LOGS/$name.log" | tail -n 1))"
  else
    echo "== $name: FAILED (exit $trc) in ${secs}s; last lines of $TIER_LOGS/$name.log:"
    tail -n 60 "$TIER_LOGS/$name.log" | sed 's/^/   | /'
    rc=1
  fi
done
if [ "$rc" -eq 0 ] && [ -n "$OWN_TIER_LOGS" ]; then rm -rf "$TIER_LOGS"; fi
echo "== scripts/test.sh exit $rc in $(since "$T0") (load: $(cut -d' ' -f1-3 /proc/loadavg))"
exit "$rc"
