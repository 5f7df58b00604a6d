"""What users install: ranges, extras, and the lowest set the wheel tier installs.

The wheel itself, installed into users' environments at both ends of its ranges, is exercised by
scripts/tiers/wheel.sh; these check the declarations it stands on, without building anything.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
OLDEST = ROOT / "scripts" / "tiers" / "wheel"


def _requirements(*extras: str) -> list[Requirement]:
    reqs = [Requirement(r) for r in PROJECT["dependencies"]]
    for extra in extras:
        reqs += [Requirement(r) for r in PROJECT["optional-dependencies"][extra]]
    return reqs


def _lower_bound(req: Requirement) -> str | None:
    bounds = [s.version for s in req.specifier if s.operator == ">="]
    return bounds[0] if bounds else None


def test_runtime_requirements_are_ranges_and_dev_tools_are_not_among_them() -> None:
    every = _requirements(*PROJECT["optional-dependencies"])
    pinned = [str(r) for r in every if any(s.operator == "==" for s in r.specifier)]
    assert pinned == [], f"exact pins in runtime requirements: {pinned}"
    names = {canonicalize_name(r.name) for r in every}
    assert not names & {"dagster-webserver", "dagster-dg-cli", "pytest", "ruff", "mypy"}
    bounds = {canonicalize_name(r.name): str(r.specifier) for r in _requirements("dagster")}
    assert bounds["dagster"] == "<2,>=1.12.6"
    assert bounds["dagster-pyspark"] == "<1,>=0.28.6"
    assert bounds["pyspark"] == "<5,>=4.0"
    assert bounds["azure-eventhub"] == "<6,>=5.12"
    assert bounds["azure-storage-blob"] == "<13,>=12.19"
    assert PROJECT["requires-python"] == ">=3.10"


def test_an_airflow_install_gets_no_dagster_and_a_dagster_install_no_airflow() -> None:
    base = {canonicalize_name(r.name) for r in _requirements()}
    airflow = {canonicalize_name(r.name) for r in _requirements("airflow")}
    dagster = {canonicalize_name(r.name) for r in _requirements("dagster")}
    assert not {n for n in airflow if n.startswith("dagster")}
    assert not {n for n in dagster if n.startswith("apache-airflow")}
    assert "deltalake" not in base  # the heavy sink library is its own extra
    assert "apache_airflow_provider" in PROJECT["entry-points"]


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)", line)
        if match:
            pins[canonicalize_name(match.group(1))] = match.group(2)
    return pins


def _pinned_at_bound(req: Requirement, pins: dict[str, str], file: str) -> None:
    name = canonicalize_name(req.name)
    assert name in pins, f"{name} is not in {file}: regenerate it (see oldest-dagster.in)"
    bound = _lower_bound(req)
    if bound is None:
        return
    pinned = pins[name].split(".")
    # A bound like 4.0 is published as 4.0.0.
    assert pinned[: len(bound.split("."))] == bound.split(".") and not any(
        p != "0" for p in pinned[len(bound.split(".")) :]
    ), f"{name}: {file} pins {pins[name]}, pyproject's lower bound is {bound}; regenerate it"


@pytest.mark.parametrize("req", _requirements(), ids=lambda r: r.name)
def test_the_engine_s_oldest_set_pins_each_lower_bound(req: Requirement) -> None:
    """scripts/tiers/wheel/oldest-engine.txt is what the tier's engine-at-its-floor venv
    installs: each runtime requirement at its declared lower bound (else the tier tests
    versions nobody declared)."""
    _pinned_at_bound(req, _pins(OLDEST / "oldest-engine.txt"), "oldest-engine.txt")


@pytest.mark.parametrize("req", _requirements("dagster")[-2:], ids=lambda r: r.name)
def test_the_oldest_dagster_project_has_the_lowest_dagster(req: Requirement) -> None:
    """The oldest Dagster project: Dagster and dagster-pyspark at their lower bounds (its
    dagster-azure raises some Azure libraries, whose floors the engine's set tests)."""
    assert canonicalize_name(req.name) in {"dagster", "dagster-pyspark"}
    _pinned_at_bound(req, _pins(OLDEST / "oldest-dagster.txt"), "oldest-dagster.txt")
