#!/usr/bin/env bash
# Airflow tier: the airflow_provider package under real Airflow 3 (dag.test(), its in-line
# triggerer) against Azurite, the Event Hubs emulator and a local Spark.
#
# Airflow resolves in the project's uv.lock (the `airflow` extra), but it is ~70 packages the
# Dagster side never needs, so it goes into its own venv, .venv-airflow, from the same lock, with
# the test tools and the Azure provider (a `wasb` connection as the store) and without Dagster,
# as in an Airflow deployment:
#   UV_PROJECT_ENVIRONMENT=.venv-airflow uv sync --frozen --extra airflow --no-default-groups \
#     --group test --group airflow-test
# The main pytest run excludes these tests (marker `airflow`); this script runs only them.
# Exits non-zero on any failure and when no test ran (pytest exit 5).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/_bootstrap.sh  # uv, the main venv, the pinned Azurite (idempotent)

VENV="$PWD/.venv-airflow"
echo "== airflow: installing the locked airflow extra into $VENV"
UV_PROJECT_ENVIRONMENT="$VENV" uv sync --frozen --extra airflow --no-default-groups \
  --group test --group airflow-test --quiet
export PYSPARK_PYTHON="$VENV/bin/python" PYSPARK_DRIVER_PYTHON="$VENV/bin/python"

echo "== airflow: mypy airflow_provider (against the installed Airflow)"
# Own cache: the main mypy run (another Python environment) must not share it.
"$VENV/bin/python" -m mypy --cache-dir "$VENV/.mypy_cache" airflow_provider

echo "== airflow: pytest -m airflow tests/airflow"
rc=0
"$VENV/bin/python" -m pytest -m airflow tests/airflow -p no:cacheprovider "$@" || rc=$?
if [ "$rc" -eq 5 ]; then
  echo "airflow tier: no test collected (is the airflow extra installed in $VENV?)" >&2
fi
exit "$rc"
