"""Print pass / fail / skip counts of a JUnit XML report, with each failure's and skip's reason.

Usage: ``python scripts/sdk_conformance/summary.py report.xml``. Counts are given per test
directory (synctests, asynctests), with the slowest tests. Exit code 1 when a test failed or
errored, or when no test ran (a run that collects nothing must not pass).
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter


def main(path: str) -> int:
    """Summarise one report; return the exit code."""
    root = ET.parse(path).getroot()
    counts: dict[str, Counter[str]] = {}
    lines: list[str] = []
    times: list[tuple[float, str]] = []
    for case in root.iter("testcase"):
        classname = case.get("classname", "")
        group = next((p for p in classname.split(".") if p.endswith("tests")), "tests")
        test = f"{classname.rsplit('.', 1)[-1]}::{case.get('name')}"
        times.append((float(case.get("time") or 0), test))
        outcome = "passed"
        for kind in ("failure", "error", "skipped"):
            node = case.find(kind)
            if node is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[kind]
                reason = (node.get("message") or node.text or "").strip().splitlines()
                first = reason[0] if reason else ""
                lines.append(f"   {outcome.upper():8} {group}/{test}: {first[:300]}")
                break
        counts.setdefault(group, Counter())[outcome] += 1
    total: Counter[str] = Counter()
    for group, c in sorted(counts.items()):
        total.update(c)
        print(f"   {group}: {_counts(c)}")
    print(f"   total: {_counts(total)}")
    for line in sorted(lines):
        print(line)
    slowest = ", ".join(f"{name} {secs:.0f}s" for secs, name in sorted(times, reverse=True)[:5])
    print(f"   slowest: {slowest}")
    return 1 if total["failed"] or total["error"] or total["passed"] == 0 else 0


def _counts(c: Counter[str]) -> str:
    n = sum(c.values())
    return (
        f"{n} tests: {c['passed']} passed, {c['failed']} failed, {c['error']} errors, "
        f"{c['skipped']} skipped"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
