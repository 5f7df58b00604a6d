"""Write the classes the local driver's class preloader loads (resources/spark/java).

Runs one cold ``ehingest run`` of 20,000 events on the local emulators (Azurite and the
project's Event Hubs emulator), its driver JVM without a class-data archive and without the
preloader, logging every class it loads (``-Xlog:class+load``), and writes to
``resources/spark/java/driver-classes.txt`` the classes Spark's jars hold that it loaded after
its gateway was up, each once, in the order it loaded them (the JVM's main thread loads the
earlier ones before anything else runs). Run it again when the pinned PySpark changes
(uv.lock): a list of another Spark's names costs the preloader its misses.

    source scripts/_bootstrap.sh
    uv run --frozen python scripts/driver_class_list.py
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from ingest_throughput import emulator_process, run_cli, send  # noqa: E402

from dagster_eventhub_ingest.resources.spark.class_preload import (  # noqa: E402
    CLASS_LIST,
    JAVA_DIR,
    PRELOAD_ENV,
)

#: A line of ``-Xlog:class+load``: the class, then where it came from.
_LOADED = re.compile(r"\] (\S+) source: (?:jar:)?file:\S+\.jar")
#: The class whose loading says the driver's gateway is up.
_GATEWAY = "org.apache.spark.api.python.PythonGatewayServer"


def classes_after_gateway(log: str) -> list[str]:
    """The classes a driver's class-loading log shows loaded from jars once its gateway
    started, in order; empty when the log is not a driver's."""
    out: list[str] = []
    seen_gateway = False
    for line in log.splitlines():
        match = _LOADED.search(line)
        if match is None:
            continue
        if match.group(1) == _GATEWAY:
            seen_gateway = True
        elif seen_gateway:
            out.append(match.group(1))
    return out


def spark_jar_classes() -> set[str]:
    """The names of the classes in Spark's jars."""
    import zipfile

    import pyspark

    names: set[str] = set()
    for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar"):
        with zipfile.ZipFile(jar) as archive:
            names.update(
                n[: -len(".class")].replace("/", ".")
                for n in archive.namelist()
                if n.endswith(".class")
            )
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--out", type=Path, default=JAVA_DIR / CLASS_LIST)
    args = parser.parse_args()
    from dagster_eventhub_ingest.emulator.azurite import azurite

    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="class-list-")))
        store = stack.enter_context(azurite())
        conn = stack.enter_context(emulator_process(4))
        send(conn, 4, args.events, 1024)
        logs = tmp / "logs"
        logs.mkdir()
        env = {
            **os.environ,
            "EHINGEST_CACHE_DIR": str(tmp / "cache"),
            "EHINGEST_JVM_ARCHIVE": "off",
            PRELOAD_ENV: "off",
            # Both of the launcher's JVMs log, each to its own file (%p: its pid).
            "JAVA_TOOL_OPTIONS": f"-Xlog:class+load=info:file={logs}/%p.log",
        }
        run_cli(conn, store, str(tmp), 2, 1, "class-list", env=env)
        lists = [classes_after_gateway(p.read_text()) for p in logs.glob("*.log")]
    logged = max(lists, key=len, default=[])
    if not logged:
        sys.exit("no driver JVM's class-loading log named the gateway")
    # Once each, and only what Spark's jars hold: the code generator's classes are logged with
    # its jar as their source, and each query defines its own.
    held = spark_jar_classes()
    classes = [name for name in dict.fromkeys(logged) if name in held]
    args.out.write_text("\n".join(classes) + "\n")
    print(f"wrote {len(classes):,} classes to {args.out}")


if __name__ == "__main__":
    main()
