#!/usr/bin/env bash
# Tier (run in the background by scripts/test.sh): the azure-eventhub SDK's own live tests
# against the emulator. See scripts/sdk_conformance.sh.
set -euo pipefail
exec bash "$(dirname "$0")/../sdk_conformance.sh"
