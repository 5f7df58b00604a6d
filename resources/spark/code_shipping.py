"""Ship this project's code to Spark executors, which never have the repository.

On a cluster or a Spark Connect server, Python workers unpickle the ``eventhubs`` data source and
the Delta writer by reference
(``dagster_eventhub_ingest.resources.eventhubs_source.EventHubsDataSource``,
``dagster_eventhub_ingest.ops.sinks.delta_writer.DeltaBatchWriter``), so the packages must be
importable there. When the session is not local, :func:`ship_code` builds a zip of those packages
once per version (cached by a hash of their sources) and adds it to the session: ``addPyFile`` on a
classic session, ``addArtifacts(path, pyfile=True)`` on Spark Connect. Local sessions share the
driver's interpreter and are left alone.

Clusters that install ``dagster-eventhub-ingest`` as a library turn shipping off with the Spark
setting ``spark.ehingest.shipCode=false`` (CLI: ``spark: {ship_code: false}``).

A Python worker that still cannot import a module fails with ``ModuleNotFoundError``; callers turn
that into a :class:`~dagster_eventhub_ingest.resources.errors.ConfigurationError` with
:func:`missing_module_error`.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import re
import tempfile
import threading
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from dagster_eventhub_ingest.resources.errors import ConfigurationError
from dagster_eventhub_ingest.resources.failures import already_exists
from dagster_eventhub_ingest.resources.spark.kind import (
    SessionMarks,
    is_connect_session,
    session_is_local,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "NAMESPACE",
    "SHIPPED_PACKAGES",
    "SHIP_CODE_CONF",
    "build_code_zip",
    "code_identity",
    "missing_module_error",
    "ship_code",
    "spark_switch",
]

logger = logging.getLogger(__name__)

#: Spark setting that turns shipping off (``"false"``) when the cluster has the package.
SHIP_CODE_CONF = "spark.ehingest.shipCode"
#: The packages Python workers import: the data source (resources) and the Delta writer (ops).
SHIPPED_PACKAGES = ("resources", "ops")

#: The import name everything ships under; the zip holds ``dagster_eventhub_ingest/<part>/...``.
NAMESPACE = "dagster_eventhub_ingest"

_SHIPPED = SessionMarks()
#: File endings of compiled extension modules (a platform wheel's native step).
_COMPILED = tuple(importlib.machinery.EXTENSION_SUFFIXES)
_SHIPPING = threading.Lock()
_MISSING_RE = re.compile(r"ModuleNotFoundError: No module named '([^']+)'")


def _sources(packages: tuple[str, ...]) -> list[tuple[Path, str]]:
    """(file, name in the zip) for the namespace's ``__init__`` and every file of ``packages``.

    Each part is found where it is imported from, so a checkout (parts beside the namespace
    package) and an installed wheel (parts inside it) ship the same zip layout.
    """
    import dagster_eventhub_ingest

    init = Path(dagster_eventhub_ingest.__file__).resolve()
    files: list[tuple[Path, str]] = [(init, f"{NAMESPACE}/__init__.py")]
    for package in packages:
        spec = importlib.util.find_spec(f"{NAMESPACE}.{package}")
        if spec is None or spec.origin is None:
            raise ConfigurationError(
                f"ship_code: package {NAMESPACE}.{package} not found; install "
                "dagster-eventhub-ingest on the cluster and set spark.ehingest.shipCode=false"
            )
        base = Path(spec.origin).resolve().parent
        for path in sorted(base.rglob("*")):
            # Compiled modules cannot be imported from a zip (and may be of another platform):
            # executors compile the reader's native step from its source instead.
            if path.name.endswith(_COMPILED):
                continue
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                rel = path.relative_to(base).as_posix()
                files.append((path, f"{NAMESPACE}/{package}/{rel}"))
    return files


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dagster-eventhub-ingest")
    except PackageNotFoundError:
        return "0+unknown"


def build_code_zip(
    cache_dir: str | os.PathLike[str] | None = None,
    packages: tuple[str, ...] = SHIPPED_PACKAGES,
) -> Path:
    """The zip of ``packages`` under the namespace (importable from its root), once per version.

    The file name holds the package version and a hash of every shipped file, so an edited
    checkout gets a new zip and an unchanged one reuses the cached zip.

    Args:
        cache_dir: where zips are kept (default: ``$TMPDIR/ehingest-code``).
        packages: parts of the namespace to include (``resources``, ``ops``).

    Returns:
        The zip's path.
    """
    files = _sources(packages)
    digest = hashlib.sha256()
    for path, arcname in files:
        digest.update(arcname.encode())
        digest.update(path.read_bytes())
    folder = Path(cache_dir or Path(tempfile.gettempdir()) / "ehingest-code")
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"dagster_eventhub_ingest-{_version()}-{digest.hexdigest()[:12]}.zip"
    if target.is_file():
        return target
    # Written under a unique name then renamed: concurrent builders never see a partial zip.
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".zip.part")
    os.close(fd)
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, arcname in files:
            # A fixed timestamp keeps the bytes (and Connect's artifact checksum) stable.
            info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, path.read_bytes())
    os.replace(tmp, target)
    logger.info("built %s (%d files) for Spark executors", target, len(files))
    return target


def spark_switch(name: str, value: object, *, on: str, off: str) -> bool:
    """Whether the value of this package's Spark setting ``name`` (None: unset, the default
    true) switches it on; ``on`` and ``off`` say what each value does, for the error.

    Raises:
        ConfigurationError: the value is neither true nor false.
    """
    enabled = str("true" if value is None else value).strip().lower()
    if enabled not in ("true", "false"):
        raise ConfigurationError(
            f"{name}: {enabled!r} is not valid; valid: true ({on}, the default) or false ({off})"
        )
    return enabled == "true"


def _shipping(value: object) -> bool:
    """Whether the value of :data:`SHIP_CODE_CONF` (None: unset) turns shipping on."""
    return spark_switch(
        SHIP_CODE_CONF,
        value,
        on="ship the project's code to executors",
        off="the cluster has the package installed",
    )


def code_identity(settings: Mapping[str, str]) -> str:
    """What a session with ``settings`` runs of this package: the name of the zip it is shipped
    (version and hash of every shipped file), or the version the cluster has installed."""
    if _shipping(settings.get(SHIP_CODE_CONF)):
        return build_code_zip().name
    return f"installed dagster-eventhub-ingest {_version()}"


def ship_code(spark: SparkSession) -> Path | None:
    """Add the project's code to a non-local ``spark`` session once; None when not needed.

    Local sessions (``local[...]`` masters) are skipped: their workers run this interpreter.
    ``spark.ehingest.shipCode=false`` skips it too (the cluster has the package installed).
    """
    with _SHIPPING:  # the run's early start may ship from its own thread meanwhile
        return _ship_code(spark)


def _ship_code(spark: SparkSession) -> Path | None:
    if spark in _SHIPPED:
        return None
    if session_is_local(spark):
        _SHIPPED.add(spark)
        return None
    if not _shipping(spark.conf.get(SHIP_CODE_CONF, "true")):
        _SHIPPED.add(spark)
        return None
    path = build_code_zip()
    if is_connect_session(spark):
        _add_artifact(spark, path)
    else:
        spark.sparkContext.addPyFile(str(path))
    _SHIPPED.add(spark)
    logger.info("shipped %s to the Spark session's executors", path.name)
    return path


def _add_artifact(spark: SparkSession, path: Path) -> None:
    """``addArtifacts`` of the zip to a Spark Connect session, tried twice.

    A session that already holds an artifact of this name holds this code: the name is the
    version and a hash of every shipped file. The server says so by its error condition
    (ARTIFACT_ALREADY_EXISTS, or nothing when the file it holds is the same), never only in its
    message. Runs that share a session (resources/spark/connect_session.py) may add it at the
    same moment, and the server's check that it holds the file and its move of the file into
    place can interleave: the second try finds it there.
    """
    for attempt in (1, 2):
        try:
            spark.addArtifacts(str(path), pyfile=True)
            return
        except Exception as exc:
            if already_exists(exc):
                return
            if attempt == 2:
                raise
            logger.debug("adding %s to the Spark Connect session failed once: %s", path.name, exc)


def missing_module_error(exc: BaseException) -> ConfigurationError | None:
    """A clear error when ``exc`` (from a Spark job) is a Python worker's ModuleNotFoundError."""
    match = _MISSING_RE.search(str(getattr(exc, "desc", None) or exc))
    if match is None:
        return None
    module = match.group(1)
    if module.split(".")[0] == NAMESPACE:
        fix = (
            f"leave code shipping on ({SHIP_CODE_CONF} unset or true; CLI: spark.ship_code) or "
            "install dagster-eventhub-ingest in the executors' Python environment"
        )
    else:
        fix = (
            f"install {module.split('.')[0]!r} in the executors' Python environment "
            "(PYSPARK_PYTHON on the workers)"
        )
    return ConfigurationError(
        f"Spark's Python workers cannot import {module!r} (ModuleNotFoundError): the code they "
        f"run is not installed where they run; {fix}"
    )
