#!/usr/bin/env bash
# Tier `eventhub_lowest`: the reader's tests with the lowest azure-eventhub pyproject.toml allows
# (the main run has the locked, newest one). The reader receives with its own AMQP code and uses
# the SDK's public API only (management calls, connection-string parsing), so it must work at
# both ends of the declared range: its receiver against the emulator, the SDK's own frames
# compared with its (tests/integration/test_amqp_receiver.py), a user's own EventHubConsumerClient beside it.
# The lowest version is layered over the locked environment (`uv run --with`): only the SDK
# differs. (tests/unit/test_reader_values.py is not run here: it builds part of its golden corpus with
# the SDK's own encoder, which before 5.15 cannot encode some of those values.) Two minutes; no
# Spark.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/_bootstrap.sh >/dev/null
LOWEST=$(sed -n 's/^ *"azure-eventhub>=\([0-9.]*\),.*/\1/p' pyproject.toml)
if [ -z "$LOWEST" ]; then
  echo "eventhub_lowest tier: no 'azure-eventhub>=X,...' range in pyproject.toml" >&2
  exit 1
fi
# 5.12 -> 5.12.0: what pip installs for ">=5.12", and what the package reports.
[[ "$LOWEST" == *.*.* ]] || LOWEST="$LOWEST.0"
echo "== eventhub_lowest: azure-eventhub==$LOWEST"
run=(uv run --frozen --with "azure-eventhub==$LOWEST")
got=$("${run[@]}" python -c "import azure.eventhub; print(azure.eventhub.__version__)")
if [ "$got" != "$LOWEST" ]; then
  echo "eventhub_lowest tier: imported azure-eventhub $got, not $LOWEST" >&2
  exit 1
fi
rc=0
"${run[@]}" pytest -p no:cacheprovider tests/integration/test_amqp_receiver.py tests/integration/test_spark_source_amqp.py \
  tests/integration/test_native_columns.py "$@" || rc=$?
if [ "$rc" -eq 5 ]; then echo "eventhub_lowest tier: no tests collected" >&2; exit 1; fi
exit "$rc"
