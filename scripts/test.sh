#!/usr/bin/env bash
# The project's test command (README, .ci/run): installs what it needs from the lock files, then
# runs lint, format check, the type checker and every test tier. Extra args go to pytest, e.g.
#   bash scripts/test.sh -m "not slow"      bash scripts/test.sh tests/test_store_contract.py
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_bootstrap.sh

echo "== ruff"; uv run --frozen ruff check .
uv run --frozen ruff format --check .
echo "== mypy"; uv run --frozen mypy
echo "== pytest"
uv run --frozen pytest "$@"
