"""What a command's process imported: the command run as ``python -m <module>`` in a fresh
interpreter that, as it exits, reports which of some modules are in ``sys.modules``.

One home for the wrapper and its marker line: :func:`reporting_imports` builds the command,
:func:`imported` reads the report back from the process's output (stderr, or both streams
merged).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Sequence

__all__ = ["SPARK_MODULES", "imported", "reporting_imports"]

#: What only a read or a write needs: a process that loads none of them starts no Spark.
SPARK_MODULES = ("pyspark", "py4j", "pyarrow")

_MARK = "IMPORTED-AT-EXIT "


def reporting_imports(module: str, *args: str, watch: Sequence[str] = SPARK_MODULES) -> list[str]:
    """The argv of ``python -m module *args`` (this interpreter) that writes, at exit, which of
    ``watch`` it imported (a line on stderr, read by :func:`imported`)."""
    code = (
        "import atexit, runpy, sys\n"
        "atexit.register(lambda: print("
        f"{_MARK!r} + repr(sorted(m for m in {tuple(watch)!r} if m in sys.modules)), "
        "file=sys.stderr, flush=True))\n"
        f"sys.argv[0] = {module!r}\n"
        f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n"
    )
    return [sys.executable, "-c", code, *args]


def imported(output: str) -> list[str]:
    """The modules a :func:`reporting_imports` process reported in ``output``."""
    reports = [line for line in output.splitlines() if line.startswith(_MARK)]
    assert reports, f"no import report in the output (did the process exit?):\n{output[-3000:]}"
    found = ast.literal_eval(reports[-1][len(_MARK) :])
    assert isinstance(found, list)
    return found
