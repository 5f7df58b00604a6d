"""The fast pull's native step (``_amqp_columns.c``): shipped compiled, or compiled once per host.

The reader's pure-Python path costs ~10.5 us of CPU per 1 KB event, nearly all of it Python's
own cost per frame (docs/run.md). ``_amqp_columns.scan`` takes the plain transfer frames whole
in the receive buffer straight to Arrow's column buffers, with no Python object per event but
its delivery tag; the AMQP receiver (:mod:`dagster_eventhub_ingest.resources.amqp.receiver`)
calls it where it would decode frame by frame.

Where it comes from, first found first:

1. The platform wheel (``manylinux`` for this project's CI platform) ships it compiled, as
   ``dagster_eventhub_ingest/resources/eventhubs_source/fastpath/_amqp_columns.<abi>.so``: the
   wheel's build hook (``hatch_build.py``) compiles it with :func:`compile_module`. Nothing is
   compiled on the user's host, and no compiler is needed there.
2. Otherwise (a pure wheel on another platform, a checkout, or executors that got the code as
   the zip the driver ships, from which Python cannot load a compiled module) the C source ships
   with the package, and the first process on a host that reads events compiles it with the
   host's C compiler and Python headers into
   :func:`dagster_eventhub_ingest.resources.spark.jvm_cache.cache_dir` (``native/``, named by a
   hash of the source, the compiler flags and the Python ABI) and loads it; every later process, run
   or executor on that host loads the file (~1 ms). Two processes compiling at once each write their
   own file and rename it into place.

A host with neither (no compiler or headers, a compile that failed: remembered beside the
target, so that it is not retried per task) or ``EHINGEST_NATIVE=0`` reads on the pure-Python
path, which reads exactly the same rows (tests/integration/test_native_columns.py proves the two
equal frame by frame and through a whole read). ``EHINGEST_NATIVE=1`` makes a missing native step an
error instead (benchmarks, tests that measure it).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import pkgutil
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path
from types import ModuleType

logger = logging.getLogger(__name__)

#: ``0``/``off``: never; ``1``/``require``: an error when it cannot be loaded; else: when it can.
NATIVE_ENV = "EHINGEST_NATIVE"
_SOURCE = "_amqp_columns.c"
# Its init function is PyInit__amqp_columns.
_NAME = "dagster_eventhub_ingest.resources.eventhubs_source.fastpath._amqp_columns"
_FLAGS = ("-O2", "-shared", "-fPIC", "-fno-strict-aliasing")
_COMPILE_TIMEOUT_SECONDS = 120.0

_lock = threading.Lock()
_tried = False
_module: ModuleType | None = None


class NativeUnavailableError(RuntimeError):
    """``EHINGEST_NATIVE=1`` and the native step cannot be built or loaded here."""


def _mode() -> str:
    from dagster_eventhub_ingest.resources.spark.jvm_cache import switched_off

    value = os.environ.get(NATIVE_ENV, "").strip().lower()
    if switched_off(value):
        return "off"
    if value in ("1", "require", "on", "true", "yes"):
        return "require"
    return "auto"


def amqp_columns() -> ModuleType | None:
    """The compiled ``_amqp_columns`` module, or None (pure Python); tried once per process."""
    global _tried, _module
    mode = _mode()
    if mode == "off":
        return None
    if not _tried:
        with _lock:
            if not _tried:
                try:
                    _module = _load_or_build()
                except Exception as exc:  # a host without a compiler, a full disk...
                    logger.info("the reader's native step is off on this host: %s", exc)
                    _module = None
                _tried = True
    if _module is None and mode == "require":
        raise NativeUnavailableError(
            f"{NATIVE_ENV}=1 but the reader's native step could not be built or loaded on this "
            "host (a C compiler and Python's headers are needed; see the log)"
        )
    return _module


def target_path() -> Path:
    """Where this host keeps the compiled module for this source, compiler flags and Python."""
    from dagster_eventhub_ingest.resources.spark.jvm_cache import cache_dir

    source = _source()
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    key = hashlib.sha256(
        source
        + b"\0"
        + " ".join(_FLAGS).encode()
        + b"\0"
        + suffix.encode()
        + b"\0"
        + sys.version.encode()
    ).hexdigest()[:16]
    return cache_dir() / "native" / f"_amqp_columns-{key}{suffix}"


def _source() -> bytes:
    data = pkgutil.get_data(
        __package__ or "dagster_eventhub_ingest.resources.eventhubs_source", _SOURCE
    )
    if data is None:
        raise FileNotFoundError(_SOURCE)
    return data


def _load(path: Path) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(_NAME, str(path))
    spec = importlib.util.spec_from_file_location(_NAME, str(path), loader=loader)
    if spec is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _load_or_build() -> ModuleType:
    return packaged() or prepare()[1]


def packaged() -> ModuleType | None:
    """The module this install's wheel ships compiled, or None (a pure wheel, a checkout, code
    shipped as a zip).

    Looked for in the package's own folder only: a module of the same name loaded from the host
    cache earlier in the process is not the wheel's.
    """
    package = sys.modules.get(__package__ or "")
    path = getattr(package, "__path__", None)
    if path is None:
        return None
    spec = importlib.machinery.PathFinder.find_spec(_NAME, list(path))
    if spec is None or spec.origin is None:
        return None
    if not isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
        return None
    return _load(Path(spec.origin))


def prepare(*, rebuild: bool = False, retry_failed: bool = False) -> tuple[Path, ModuleType]:
    """This host's compiled module and where it is: loaded, compiled first if there is none
    (unless a compile failed here before and not ``retry_failed``), compiled again with
    ``rebuild``."""
    target = target_path()
    failed = target.with_suffix(".failed")
    if rebuild or retry_failed:
        failed.unlink(missing_ok=True)
    elif failed.exists() and not target.exists():
        raise RuntimeError(f"compiling it failed before on this host (see {failed})")
    if rebuild or not target.exists():
        build(target)
    return target, _load(target)


def _compiler() -> list[str]:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise RuntimeError("no C compiler (cc, gcc or clang) on PATH")
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").exists():
        raise RuntimeError(f"Python's headers are not installed ({include}/Python.h)")
    extra = ["-undefined", "dynamic_lookup"] if sys.platform == "darwin" else []
    return [*cc.split(), *_FLAGS, *extra, "-I", str(include)]


def compile_module(target: Path, source: bytes) -> Path:
    """Compile ``source`` (``_amqp_columns.c``) for this interpreter into ``target``, written
    to a temporary name first and renamed into place.

    The one compile, for the host cache (:func:`build`) and for the platform wheel
    (``hatch_build.py`` loads this module by its path, outside the package). Raises
    ``RuntimeError`` saying why it cannot (no compiler, no headers, the compiler's error, in
    ``<target>.failed``).
    """
    if os.name == "nt":
        raise RuntimeError("not built on Windows")
    target.parent.mkdir(parents=True, exist_ok=True)
    command = _compiler()
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        src = Path(tmp) / _SOURCE
        src.write_bytes(source)
        out = Path(tmp) / target.name
        result = subprocess.run(
            [*command, str(src), "-o", str(out)],
            capture_output=True,
            text=True,
            timeout=_COMPILE_TIMEOUT_SECONDS,
            check=False,
        )
        if result.returncode != 0:
            failed = target.with_suffix(".failed")
            failed.write_text(" ".join(command) + "\n" + result.stderr[-4000:])
            raise RuntimeError(f"{command[0]} failed (exit {result.returncode}); see {failed}")
        os.replace(out, target)
    return target


def build(target: Path | None = None) -> Path:
    """Compile the module for this host into ``target`` (default :func:`target_path`)."""
    target = compile_module(target or target_path(), _source())
    logger.info("compiled the reader's native step into %s", target)
    return target


def reset_for_tests() -> None:
    """Forget what was tried in this process (tests switch ``EHINGEST_NATIVE``)."""
    global _tried, _module
    with _lock:
        _tried = False
        _module = None


if (
    __name__ == "__main__"
):  # python -m dagster_eventhub_ingest.resources.eventhubs_source.fastpath.loader: build it now
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    print(prepare(retry_failed=True))
