#!/usr/bin/env bash
# Runs the azure-eventhub SDK's own live tests (tests/livetest/synctests and asynctests of the
# LOCKED version's sdist on PyPI, unmodified) against `ehingest emulator serve`, through the
# project's conftest (scripts/sdk_conformance/conftest.py), sync and async in one pytest-xdist
# pool. Prints passed / failed / skipped (sync and async apart) with each failure's and skip's
# reason; exits non-zero on any failure, error, or when nothing ran.
#
#   bash scripts/sdk_conformance.sh                  # everything (~6-8 min on 2 busy cores)
#   bash scripts/sdk_conformance.sh -k "send"         # extra args go to pytest
#   SDK_CONFORMANCE_RUNS=sync bash scripts/sdk_conformance.sh   # only one of sync / async
#
# About 2 x 1100 s of the tests is time.sleep, so they run on $SDK_CONFORMANCE_WORKERS (10)
# pytest-xdist workers. Upstream's tests would sleep 250 s in test_send_with_long_interval
# unless --sleep False; we pass False (their own option), which closes the connection instead. Test-only deps (pytest-asyncio,
# aiohttp, azure-identity, certifi) come in through `uv run --with`: the project's deps are
# untouched. The sdist is cached in ${XDG_CACHE_HOME:-~/.cache}/ehingest-sdk-conformance and its
# sha256 is checked against uv.lock.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_bootstrap.sh
ROOT=$PWD
RUNS=${SDK_CONFORMANCE_RUNS:-sync async}
TEST_DEPS=(--with "pytest-asyncio==1.3.0" --with "aiohttp==3.13.2" --with "azure-identity==1.25.1"
           --with "certifi" --with "pytest-xdist==3.8.0")
WORKERS=${SDK_CONFORMANCE_WORKERS:-10}  # pytest-xdist workers: the tests mostly sleep

read -r VERSION URL SHA256 < <(uv run --frozen python - <<'PY'
import tomllib
lock = tomllib.load(open("uv.lock", "rb"))
pkg = next(p for p in lock["package"] if p["name"] == "azure-eventhub")
sdist = pkg["sdist"]
print(pkg["version"], sdist["url"], sdist["hash"].split(":", 1)[1])
PY
)
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/ehingest-sdk-conformance
SDIST=$CACHE/azure_eventhub-$VERSION.tar.gz
mkdir -p "$CACHE"
if [ ! -s "$SDIST" ] || ! echo "$SHA256  $SDIST" | sha256sum -c --quiet - 2>/dev/null; then
  echo "== downloading azure-eventhub $VERSION sdist (locked in uv.lock) from PyPI"
  uv run --frozen python -c "import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])" "$URL" "$SDIST.part"
  echo "$SHA256  $SDIST.part" | sha256sum -c --quiet - || { echo "sha256 of $URL does not match uv.lock" >&2; exit 1; }
  mv "$SDIST.part" "$SDIST"
fi

WORK=$(mktemp -d -t ehingest-sdk-conformance.XXXXXX)
EMU_PID=""
RUN_PID=""
cleanup() {
  if [ -n "$RUN_PID" ]; then kill -TERM -- "-$RUN_PID" 2>/dev/null || kill -TERM "$RUN_PID" 2>/dev/null || true; fi
  if [ -n "$EMU_PID" ]; then
    kill -TERM "$EMU_PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$EMU_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$EMU_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

tar -xzf "$SDIST" -C "$WORK" --strip-components=1 \
  "azure_eventhub-$VERSION/tests/livetest/synctests" "azure_eventhub-$VERSION/tests/livetest/asynctests"
cp scripts/sdk_conformance/conftest.py "$WORK/tests/conftest.py"
cat >"$WORK/tests/pytest.ini" <<'INI'
[pytest]
asyncio_mode = strict
asyncio_default_fixture_loop_scope = function
timeout = 300
filterwarnings = ignore::DeprecationWarning
INI

read -r PORT WS_PORT < <(uv run --frozen python -c "
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks: s.bind(('127.0.0.1', 0))
print(*[s.getsockname()[1] for s in socks])
for s in socks: s.close()")
POOL=$((WORKERS * 50))  # each test takes a fresh hub (about 220 tests; workers get equal slices)
HUBS=()
for i in $(seq 0 $((POOL - 1))); do HUBS+=(--hub "h$i:2"); done
JWT_SECRET="conformance-$RANDOM$RANDOM"
echo "== emulator on 127.0.0.1:$PORT (WebSockets :$WS_PORT), $POOL hubs"
.venv/bin/ehingest emulator serve --port "$PORT" --ws-port "$WS_PORT" --namespace 127.0.0.1 \
  --jwt-test-secret "$JWT_SECRET" "${HUBS[@]}" >"$WORK/emulator.out" 2>"$WORK/emulator.log" &
EMU_PID=$!
for _ in $(seq 300); do
  [ -s "$WORK/emulator.out" ] && break
  kill -0 "$EMU_PID" 2>/dev/null || { cat "$WORK/emulator.log" >&2; exit 1; }
  sleep 0.1
done
[ -s "$WORK/emulator.out" ] || { echo "emulator did not start" >&2; cat "$WORK/emulator.log" >&2; exit 1; }

export CONFORMANCE_HOST="127.0.0.1:$PORT" CONFORMANCE_WS_PORT="$WS_PORT"
export CONFORMANCE_KEY_NAME=RootManageSharedAccessKey CONFORMANCE_KEY=SAS_KEY_VALUE
export CONFORMANCE_JWT_SECRET="$JWT_SECRET" CONFORMANCE_HUBS="h:$POOL"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
DIRS=()
for run in $RUNS; do
  case $run in sync) DIRS+=(livetest/synctests) ;; async) DIRS+=(livetest/asynctests) ;;
    *) echo "SDK_CONFORMANCE_RUNS: '$run' is not sync or async" >&2; exit 2 ;; esac
done
echo "== pytest ${DIRS[*]} on $WORKERS workers (log: $WORK/pytest.log)"
START=$(date +%s)
rc=0
(cd "$WORK/tests" && exec setsid uv run --project "$ROOT" --frozen "${TEST_DEPS[@]}" \
  pytest -c pytest.ini "${DIRS[@]}" --sleep False -p no:cacheprovider -n "$WORKERS" --dist worksteal -q -rfEs \
  --junitxml "$WORK/report.xml" "$@" >"$WORK/pytest.log" 2>&1) &
RUN_PID=$!
wait "$RUN_PID" || rc=$?
RUN_PID=""
SECS=$(( $(date +%s) - START ))
EMU_CPU=$(awk -v hz="$(getconf CLK_TCK)" '{printf "%.0f", ($14 + $15) / hz}' "/proc/$EMU_PID/stat" 2>/dev/null || echo "?")

status=0
echo "== pytest exit $rc"
if [ ! -s "$WORK/report.xml" ]; then
  echo "   no report; last lines of the log:"; tail -n 60 "$WORK/pytest.log" | sed 's/^/   | /'
  status=1
else
  uv run --frozen python scripts/sdk_conformance/summary.py "$WORK/report.xml" || status=1
fi
[ "$rc" -eq 0 ] || status=1
echo "== SDK conformance (azure-eventhub $VERSION live tests vs the emulator): pytest ${SECS}s (emulator CPU ${EMU_CPU}s, load $(cut -d' ' -f1-3 /proc/loadavg)), $( [ $status -eq 0 ] && echo PASSED || echo FAILED )"
if [ $status -ne 0 ]; then echo "   emulator log tail:"; grep -v '^hub ' "$WORK/emulator.log" | tail -n 20 | sed 's/^/   | /'; fi
exit $status
