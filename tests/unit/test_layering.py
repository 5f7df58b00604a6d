"""The import rules of the layout, checked on the source (no imports executed).

resources <- ops <- dagster_project, one way; the emulator and the benchmarks stand on the project,
never on cli/ or tests/; the packages the cycle check lists have no import cycle; a package
imports no other package's private names. Imports under ``if TYPE_CHECKING:`` do not count (they
never run).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.imports import SPARK_MODULES

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path, module: str) -> set[str]:
    """Modules ``path`` (the module ``module``) imports, relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            names.add(base)
            # ``from pkg import mod`` imports the module pkg.mod when there is one.
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


NAMESPACE = "dagster_eventhub_ingest"
#: The folders the wheel maps under the one import name (pyproject's hatch ``sources``).
PARTS = ("resources", "ops", "dagster_project", "emulator", "cli", "airflow_provider")


def _modules(package: str) -> dict[str, set[str]]:
    """Module name -> what it imports, for every module in the folder ``package``."""
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        name = ".".join(p for p in rel.parts if p != "__init__")
        if package in PARTS:
            name = f"{NAMESPACE}.{name}"
        out[name] = _imports(path, name)
    return out


def _part(name: str) -> str:
    """The folder a module name belongs to: ``dagster_eventhub_ingest.ops.run.processor`` ->
    ``ops``."""
    head, _, rest = name.partition(".")
    return rest.split(".")[0] if head == NAMESPACE and rest else head


#: Dagster's distributions: only dagster_project/ may import them (the `dagster` extra).
DAGSTER = {"dagster", "dagster_pyspark", "dagster_spark", "dagster_dg_cli", "dagster_shared"}


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("resources", {"ops", "dagster_project", "cli", "emulator", "bench", "tests", *DAGSTER}),
        ("ops", {"dagster_project", "cli", "emulator", "bench", "tests", *DAGSTER}),
        ("dagster_project", {"cli", "emulator", "bench", "tests"}),
        # The emulator owns its command line (``ehingest emulator`` mounts it, not the reverse).
        (
            "emulator",
            {"cli", "ops", "dagster_project", "airflow_provider", "bench", "tests", *DAGSTER},
        ),
        # The benchmarks stand on the project (Azurite control is
        # dagster_eventhub_ingest.emulator.azurite), not on tests.
        ("bench", {"tests"}),
        # The CLI and the Airflow provider are surfaces over ops/resources: neither stands on
        # Dagster's surface nor on each other (Airflow installs without Dagster).
        ("cli", {"dagster_project", "airflow_provider", "bench", "tests", *DAGSTER}),
        ("airflow_provider", {"dagster_project", "cli", "emulator", "bench", "tests", *DAGSTER}),
    ],
)
def test_layers_import_only_downward(package: str, forbidden: set[str]) -> None:
    bad = {
        (module, name)
        for module, names in _modules(package).items()
        for name in names
        if _part(name) in forbidden
    }
    assert not bad, f"{package}/ imports upward: {sorted(bad)}"


@pytest.mark.parametrize("package", [*PARTS, "bench"])
def test_no_import_cycle_in(package: str) -> None:
    """No module of the package imports itself back, however indirectly.

    Function-level imports count too (only ``TYPE_CHECKING`` ones do not): a lazy import that
    closes a cycle works until someone hoists it. The graph is module to module: importing
    ``dagster_eventhub_ingest.resources.eventhubs_source.plan`` is an edge to that module, not to
    the package's face.
    """
    modules = _modules(package)
    graph = {module: {n for n in names if n in modules} for module, names in modules.items()}

    def reaches(start: str, target: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt == target:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    cycles = sorted(
        (module, dep)
        for module, deps in graph.items()
        for dep in deps
        if dep != module and reaches(dep, module)
    )
    assert not cycles, f"import cycles in {package}/: {cycles}"


def test_the_cycle_check_sees_package_modules_and_relative_imports() -> None:
    """The graph knows the source package's nested modules and a face's imports (the
    configuration model's; a lazy face, PEP 562, names its modules only as strings)."""
    modules = _modules("resources")
    assert "dagster_eventhub_ingest.resources.eventhubs_source.compat.resolve" in modules
    assert (
        "dagster_eventhub_ingest.resources.config._places"
        in modules["dagster_eventhub_ingest.resources.config"]
    )


def test_executor_modules_do_not_import_driver_only_packages() -> None:
    """What executors import from the shipped code needs no pydantic or Dagster.

    A cluster's executors get resources/ and ops/ as a zip and their Python has only the
    runtime libraries the readers and writers use (the cluster tier builds such a Python); the
    configuration model and Dagster live on the driver. An eager import in a package
    ``__init__`` once pulled pydantic into every executor through
    ``dagster_eventhub_ingest.ops.sinks.write``.
    """
    ns = NAMESPACE
    code = (
        f"import sys, {ns}.ops.sinks.write, {ns}.resources.eventhubs_source, "
        f"{ns}.resources.eventhubs_source.stream, {ns}.resources.eventhubs_source.compat.resolve\n"
        f"print(','.join(m for m in ('pydantic', 'dagster', '{ns}.resources.config', "
        f"'{ns}.ops.run') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "", f"executor-side imports pull in: {out.stdout.strip()}"


def test_planning_a_read_imports_no_spark() -> None:
    """The driver plans a read (options, ranges, the plan) before it knows there is anything to
    read; a run with nothing to read imports no pyspark, py4j or pyarrow
    (tests/integration/test_quiet_run.py), so neither may the plan's names. ``ReadPlan`` once
    imported pyspark through the input partitions' module."""
    ns = NAMESPACE
    code = (
        f"import sys\nfrom {ns}.resources import ReadPlan, ReadOptions, PartitionRange\n"
        f"from {ns}.resources.eventhubs_source.plan import input_partitions\n"
        f"print(sorted(m for m in {SPARK_MODULES!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[]", f"planning a read imported: {out.stdout.strip()}"


def test_the_engine_the_cli_and_the_emulator_never_load_dagster() -> None:
    """An install without the ``dagster`` extra (an Airflow deployment, a cron job) imports
    the engine, the CLI and the emulator: none of them may load Dagster, however indirectly
    (through a third-party library too). The Airflow provider's own check runs in the Airflow
    tier, whose venv has no Dagster at all (tests/airflow/test_provider.py)."""
    modules = sorted(
        name
        for part in ("resources", "ops", "cli", "emulator")
        for name in _modules(part)
        if not name.endswith("__main__")
    )
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        f"set({sorted(DAGSTER)!r})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[]", f"Dagster loaded by the engine: {out.stdout.strip()}"


@pytest.mark.parametrize("folder", [*PARTS, "bench", "tests", "scripts"])
def test_parts_are_imported_through_the_one_import_name(folder: str) -> None:
    """``import resources...`` works in a checkout only: in the wheel the parts live under
    ``dagster_eventhub_ingest``, and a bare import there is a second copy of every class."""
    bare = {
        (str(path.relative_to(ROOT)), name)
        for path in sorted((ROOT / folder).rglob("*.py"))
        for name in _imports(path, "x")
        if name.split(".")[0] in PARTS
    }
    assert not bare, f"bare imports of the namespaced parts: {sorted(bare)}"


def test_test_modules_import_no_other_test_module() -> None:
    """A helper two test modules share lives in tests/support, once: a test module imported by
    another runs its fixtures and collection-time code twice, and hides where the helper is."""
    crossing = {
        (str(path.relative_to(ROOT)), name)
        for path in sorted((ROOT / "tests").rglob("test_*.py"))
        for name in _imports(path, ".".join(path.relative_to(ROOT).with_suffix("").parts))
        if name.startswith("tests.") and name.rpartition(".")[2].startswith("test_")
    }
    assert not crossing, f"test modules importing test modules: {sorted(crossing)}"


def _is_package(name: str) -> bool:
    """Whether the module name ``dagster_eventhub_ingest.x.y`` is a package (a folder)."""
    parts = name.split(".")
    return parts[0] == NAMESPACE and (ROOT.joinpath(*parts[1:]) / "__init__.py").is_file()


def _owner(name: str) -> str | None:
    """The package a private name belongs to, or None when ``name`` names nothing private: a
    private module ``pkg._mod`` (or anything in it) belongs to ``pkg``, a private name
    ``pkg.mod._x`` to ``pkg`` too (the package whose modules may share it)."""
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            head = ".".join(parts[:i])
            return head if _is_package(head) else ".".join(parts[: i - 1])
    return None


def _private_imports(path: Path, module: str) -> set[str]:
    """``from X import Y`` names with a private part (a ``_module`` or a ``_name``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            found.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {n for n in found if n.startswith(f"{NAMESPACE}.") and _owner(n) is not None}


@pytest.mark.parametrize("part", [*PARTS, "bench"])
def test_no_private_name_crosses_packages(part: str) -> None:
    """A ``_name`` or ``_module`` is its package's own: another package imports the public
    names, so a package can change its insides without breaking its neighbours."""
    bad = set()
    for path in sorted((ROOT / part).rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        module = ".".join([NAMESPACE, *(p for p in rel.parts if p != "__init__")])
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for name in _private_imports(path, module):
            owner = _owner(name)
            assert owner is not None
            if package != owner and not package.startswith(f"{owner}."):
                bad.add((str(rel), name))
    assert not bad, f"private names imported from another package: {sorted(bad)}"


@pytest.mark.parametrize(
    ("name", "owner"),
    [
        (
            "dagster_eventhub_ingest.resources.eventhubs_source.fastpath._amqp_columns",
            "dagster_eventhub_ingest.resources.eventhubs_source.fastpath",
        ),
        (
            "dagster_eventhub_ingest.resources.eventhubs_source.receiver._PartitionPull",
            "dagster_eventhub_ingest.resources.eventhubs_source",
        ),
        (
            "dagster_eventhub_ingest.ops.sinks.statistics._SPLIT_FROM_PARTITIONS",
            "dagster_eventhub_ingest.ops.sinks",
        ),
        ("dagster_eventhub_ingest.resources.eventhubs_source.stats.SubRangeKey", None),
        ("dagster_eventhub_ingest.ops.sinks.statistics.choose_stats_method", None),
    ],
)
def test_the_private_check_knows_whose_a_name_is(name: str, owner: str | None) -> None:
    assert _owner(name) == owner
