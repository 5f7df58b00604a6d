#!/usr/bin/env bash
# Tier `cluster`: ingestion on a standalone Spark cluster (master + one 2-core worker from the
# pip pyspark) and on a Spark Connect server running on it, with executors whose Python has the
# dependencies but not this project (tests/cluster/). One cluster and one Connect server for the
# whole tier; every process it starts is stopped by the fixtures. Run by scripts/test.sh in the
# background beside the main pytest run, or alone: bash scripts/tiers/cluster.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/_bootstrap.sh >/dev/null
# The executors' venv (the lock without the project) is built by the fixture from uv's cache.
rc=0
uv run --frozen pytest -m cluster tests/cluster -p no:cacheprovider "$@" || rc=$?
if [ "$rc" -eq 5 ]; then echo "cluster tier: no tests collected" >&2; exit 1; fi
exit "$rc"
