"""Shared fixtures: real local services (always stopped) and per-test uuid-named containers.

Fixtures per area live in ``tests/support/fixtures/<area>.py`` and are registered below.
"""

from __future__ import annotations

import importlib.util
import os
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import settings

from dagster_eventhub_ingest.emulator import azurite as services

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")

# CI draws the same Hypothesis examples on every run, so a red CI names a change, not a draw
# (tests/unit/test_simulation.py::test_staggered_scale_out_can_phase_lock_a_steal is a case a random
# draw finds in ~7 % of runs). Elsewhere the draws stay random and explore.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

pytest_plugins = [
    "tests.support.fixtures.store",
    "tests.support.fixtures.emulator",
    "tests.support.fixtures.spark",
    "tests.support.fixtures.native",
]
# The Airflow tier's venv has no Dagster (an Airflow install never gets it).
if importlib.util.find_spec("dagster") is not None:
    pytest_plugins.append("tests.support.fixtures.dagster")


@pytest.fixture(scope="session")
def azurite_connection_string() -> Iterator[str]:
    """Connection string of an Azurite blob service started for this test session."""
    with services.azurite() as conn:
        yield conn


@pytest.fixture
def container_name() -> str:
    """A fresh, uuid-named container name for one test."""
    return f"t-{uuid.uuid4().hex[:20]}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Browser tests run only in their tier (``-m browser``), even when ``-m`` is overridden."""
    expr = str(config.getoption("markexpr") or "")
    if "browser" in expr and "not browser" not in expr:
        return
    skip = pytest.mark.skip(reason="browser tier: run by scripts/tiers/browser.sh (-m browser)")
    for item in items:
        if "browser" in item.keywords:
            item.add_marker(skip)
