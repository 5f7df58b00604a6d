"""The import rules of the layout, checked on the source (no imports executed).

resources <- ops <- dagster_project, one way; the store/settings core of resources/ has no
import cycle (resources/blob_store.py and resources/settings.py used to import each other).
Imports under ``if TYPE_CHECKING:`` do not count (they never run).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _modules(package: str) -> dict[str, set[str]]:
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        name = ".".join(p for p in rel.parts if p != "__init__")
        out[name] = _imports(path)
    return out


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("resources", {"ops", "dagster_project", "cli", "emulator", "bench", "tests"}),
        ("ops", {"dagster_project", "cli", "emulator", "bench", "tests"}),
        ("dagster_project", {"cli", "emulator", "bench", "tests"}),
    ],
)
def test_layers_import_only_downward(package: str, forbidden: set[str]) -> None:
    bad = {
        (module, name)
        for module, names in _modules(package).items()
        for name in names
        if name.split(".")[0] in forbidden
    }
    assert not bad, f"{package}/ imports upward: {sorted(bad)}"


# The store, settings and config core must stay cycle-free. (The Spark side, spark_source with
# its options, session and code-shipping modules, still has cycles to untangle.)
ACYCLIC = (
    "resources.errors",
    "resources.credentials",
    "resources.settings",
    "resources.config",
    "resources.store",
    "resources.memory_store",
    "resources.blob_store",
)


def test_no_import_cycle_through_the_store_and_settings_core() -> None:
    graph = {
        module: {n for n in names if n.startswith("resources.")}
        for module, names in _modules("resources").items()
    }

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
        (module, dep) for module in ACYCLIC for dep in graph[module] if reaches(dep, module)
    )
    assert not cycles, f"import cycles in resources/: {cycles}"


def test_executor_modules_do_not_import_driver_only_packages() -> None:
    """What executors import from the shipped code needs no pydantic or Dagster.

    A cluster's executors get resources/ and ops/ as a zip and their Python has only the
    runtime libraries the readers and writers use (the cluster tier builds such a Python); the
    configuration model and Dagster live on the driver. An eager import in a package
    ``__init__`` once pulled pydantic into every executor through ``ops.write``.
    """
    code = (
        "import sys, ops.write, resources.spark_source, resources.eventhubs_stream, "
        "resources.eventhubs_positions\n"
        "print(','.join(m for m in ('pydantic', 'dagster', 'resources.config', 'ops.run') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "", f"executor-side imports pull in: {out.stdout.strip()}"
