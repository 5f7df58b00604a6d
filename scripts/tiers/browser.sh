#!/usr/bin/env bash
# Browser tier: a backfill launched from the Dagster UI in a real Chromium (Playwright for Python
# driving Debian's chromium; Playwright's own browser download is never used) against
# `dagster dev` on the local emulators. tests/browser/test_browser_ui.py, marker `browser` (excluded from
# the main pytest run). Installs what it needs; screenshots and dagster dev's log go to
# $TIER_LOGS/browser-artifacts (or a temp dir), printed at the start.
#   bash scripts/tiers/browser.sh            (scripts/test.sh runs it in the background)
set -euo pipefail
cd "$(dirname "$0")/../.."
START=$(date +%s)
source scripts/_bootstrap.sh >/dev/null

if [ ! -x /usr/bin/chromium ]; then
  echo "== installing Debian's chromium (apt)"
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq chromium >/dev/null
fi

ARTIFACTS="${EHINGEST_ARTIFACTS:-${TIER_LOGS:-$(mktemp -d -t ehingest-browser.XXXXXX)}/browser-artifacts}"
mkdir -p "$ARTIFACTS"
export EHINGEST_ARTIFACTS="$ARTIFACTS"
echo "== browser tier: screenshots and logs in $ARTIFACTS"

rc=0
# -m browser overrides the main run's `-m 'not browser'`; exit 5 (nothing collected) fails too.
uv run --frozen pytest -m browser tests/browser/test_browser_ui.py -p no:cacheprovider -s "$@" || rc=$?
if [ "$rc" -eq 5 ]; then echo "browser tier: no test collected" >&2; rc=1; fi
echo "== browser tier finished in $(( $(date +%s) - START )) s (exit $rc)"
exit "$rc"
