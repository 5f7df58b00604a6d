#!/usr/bin/env bash
# Native-step tier: resources/eventhubs_source/fastpath/_amqp_columns.c built with AddressSanitizer and
# UndefinedBehaviorSanitizer, then the frame-level tests of tests/integration/test_native_columns.py (every
# event shape, refused frames, hypothesis over random and mutated frames, truncation at every
# 7th byte) and tests/unit/test_reader_values.py (the golden corpus, every AMQP type, generated and
# mutated messages) run against that build: a read past a frame or the buffer, an overflow or
# a bad shift stops the run with the sanitizer's report. Seconds; no services.
# Exits non-zero on any failure and when no test ran (pytest exit 5).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/_bootstrap.sh

CACHE=$(mktemp -d -t ehingest-asan.XXXXXX)
trap 'rm -rf "$CACHE"' EXIT
export EHINGEST_CACHE_DIR="$CACHE" EHINGEST_NATIVE=1
TARGET=$(uv run --frozen python -c "from dagster_eventhub_ingest.resources.eventhubs_source.fastpath import loader; print(loader.target_path())")
mkdir -p "$(dirname "$TARGET")"
INCLUDE=$(uv run --frozen python -c "import sysconfig; print(sysconfig.get_paths()['include'])")
echo "== native_asan: building $TARGET with -fsanitize=address,undefined"
${CC:-cc} -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all \
  -shared -fPIC -I "$INCLUDE" resources/eventhubs_source/fastpath/_amqp_columns.c -o "$TARGET"
ASAN_LIB=$(${CC:-cc} -print-file-name=libasan.so)
UBSAN_LIB=$(${CC:-cc} -print-file-name=libubsan.so)

echo "== native_asan: pytest tests/integration/test_native_columns.py tests/unit/test_reader_values.py"
rc=0
# The interpreter is not built with ASan: its own allocations are not leaks of ours.
LD_PRELOAD="$ASAN_LIB:$UBSAN_LIB" ASAN_OPTIONS=detect_leaks=0 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  .venv/bin/python -m pytest -p no:cacheprovider tests/integration/test_native_columns.py \
  tests/unit/test_reader_values.py -m "not integration" \
  -k "not built_once and not cannot_compile and not the_cli and not shipped_zip and not off_means" \
  "$@" || rc=$?
if [ "$rc" -eq 5 ]; then
  echo "native_asan tier: no test collected" >&2
fi
exit "$rc"
