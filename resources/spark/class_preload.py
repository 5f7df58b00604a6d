"""A local driver JVM without a class-data archive loads Spark's classes on a second thread.

A local driver JVM that starts without a class-data archive (a fresh host's first run:
docs/deploy.md) loads ~9,400 classes from Spark's jars once its gateway is up, each on the
thread that first needs it: the context's and the session's start, then, mid-read, the read's
planning and code generation (Janino) and the tasks that take the readers' Arrow batches, while
the readers keep both cores busy. A Java
agent (``java/ClassPreload.java``) starts one daemon thread at the JVM's start that loads the
classes of :data:`CLASS_LIST` in the order a run loads them, so the run's threads find most of
them loaded. It loads each with the system class loader (the one that loads Spark's jars)
without initialising it: no static initialiser runs on its thread, and no class loads that a run
does not load. With an archive the JVM maps these classes already, and the agent is not added.

The list is a run's own: ``scripts/driver_class_list.py`` writes it from the class-loading log
of a cold ``ehingest run`` (the classes loaded from jars after the gateway is up). A name another
Spark does not hold is skipped; a list that mostly misses is given up.

Where the agent's jar comes from, first found first: the wheel ships it compiled
(``hatch_build.py``, with :func:`build_jar`); otherwise (a checkout, a wheel built without a
JDK) the first local driver that starts without an archive compiles it once per host into the
cache (``javac`` of the JDK that runs the driver, ~1 s), and a host without ``javac`` starts
its drivers without it. ``EHINGEST_JVM_PRELOAD=off`` leaves it out.

Only for the JVM this package launches for a local master with its own Java options and
Spark's own jars (:func:`~dagster_eventhub_ingest.resources.spark.session.owns_driver_classes`).

This module imports nothing of the package at its top: the wheel's build hook loads it by path.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = [
    "CLASS_LIST",
    "DONE_PROPERTY",
    "JAR",
    "JAVA_DIR",
    "PRELOAD_ENV",
    "SOURCE",
    "agent_jar",
    "build_jar",
    "find_javac",
    "preload_java_options",
]

#: ``off`` (or ``0``, ``false``, ``no``): local drivers start without the agent.
PRELOAD_ENV = "EHINGEST_JVM_PRELOAD"
#: Beside this module: the agent's source, the jar a wheel ships, and the classes to load.
JAVA_DIR = Path(__file__).resolve().parent / "java"
SOURCE = "ClassPreload.java"
JAR = "ehingest-class-preload.jar"
CLASS_LIST = "driver-classes.txt"
#: The JVM system property the agent sets once done: ``N loaded, M missed`` (``, given up``).
DONE_PROPERTY = "ehingest.classPreload"
#: The agent's class (its package is a folder in the jar).
_AGENT_CLASS = "dagster_eventhub_ingest.spark.ClassPreload"
#: Spark 4 runs on Java 17 and later.
_RELEASE = "17"
_COMPILE_TIMEOUT_SECONDS = 120.0


def preload_java_options(env: Mapping[str, str] = os.environ) -> str:
    """The Java options that add the agent to a local driver JVM about to start without a
    class-data archive, on this package's Java options and Spark's own jars (the caller
    checks: :func:`~dagster_eventhub_ingest.resources.spark.session.owns_driver_classes`);
    empty when it is left out (switched off, no list, no jar and no ``javac`` to build one)."""
    from dagster_eventhub_ingest.resources.spark.jvm_cache import switched_off

    if switched_off(env.get(PRELOAD_ENV)):
        return ""
    classes = JAVA_DIR / CLASS_LIST
    if not classes.is_file():
        return ""
    jar = agent_jar(env)
    # The JVM takes the jar's path up to the first "=" (what follows is the agent's argument).
    if jar is None or "=" in str(jar):
        return ""
    # Spark splits the Java options as a shell would: a path with a space stays one option.
    return shlex.quote(f"-javaagent:{jar}={classes}")


def agent_jar(env: Mapping[str, str] = os.environ) -> Path | None:
    """The agent's jar: the wheel's, else this host's compiled copy (compiled now if there is
    none, unless compiling failed here before), else None."""
    shipped = JAVA_DIR / JAR
    if shipped.is_file():
        return shipped
    from dagster_eventhub_ingest.resources.spark.jvm_cache import cache_dir

    source = (JAVA_DIR / SOURCE).read_bytes()
    key = hashlib.sha256(source + b"\0" + _RELEASE.encode()).hexdigest()[:16]
    target = cache_dir(env) / "preload" / f"class-preload-{key}.jar"
    if target.is_file():
        return target
    if target.with_suffix(".failed").exists():
        return None
    javac = find_javac(env)
    if javac is None:
        logger.debug("no javac on this host: local drivers start without the class preloader")
        return None
    try:
        return build_jar(target, source, javac)
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        logger.info("the driver's class preloader is off on this host: %s", exc)
        return None


def find_javac(env: Mapping[str, str] = os.environ) -> str | None:
    """The ``javac`` beside the ``java`` Spark's launcher runs (``$JAVA_HOME``, else ``PATH``)."""
    home = env.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if java:
        beside = Path(os.path.realpath(java)).with_name("javac")
        if beside.is_file():
            return str(beside)
    return None if home else shutil.which("javac")


def build_jar(target: Path, source: bytes, javac: str) -> Path:
    """Compile ``source`` (``ClassPreload.java``) with ``javac`` into the agent's jar at
    ``target``, written to a temporary name first and renamed into place.

    The one build, for the host cache and for the wheel (``hatch_build.py`` loads this module
    by its path). Raises ``RuntimeError`` saying why it cannot (the compiler's error, kept in
    ``<target>.failed``).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        src = Path(tmp, SOURCE)
        src.write_bytes(source)
        classes = Path(tmp, "classes")
        command = [javac, "--release", _RELEASE, "-nowarn", "-d", str(classes), str(src)]
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=_COMPILE_TIMEOUT_SECONDS, check=False
        )
        if result.returncode != 0:
            failed = target.with_suffix(".failed")
            failed.write_text(" ".join(command) + "\n" + result.stderr[-4000:])
            raise RuntimeError(f"javac failed (exit {result.returncode}); see {failed}")
        out = Path(tmp, target.name)
        manifest = f"Manifest-Version: 1.0\nPremain-Class: {_AGENT_CLASS}\n"
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as jar:
            _add(jar, "META-INF/MANIFEST.MF", manifest.encode())
            for path in sorted(classes.rglob("*.class")):
                _add(jar, path.relative_to(classes).as_posix(), path.read_bytes())
        os.replace(out, target)
    return target


def _add(jar: zipfile.ZipFile, name: str, data: bytes) -> None:
    # A fixed time: the same source gives the same jar.
    jar.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
