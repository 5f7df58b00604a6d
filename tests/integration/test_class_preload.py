"""The local driver's class preloader (resources/spark/class_preload.py): a Java agent that loads
Spark's classes on a thread of its own in a driver JVM started without a class-data archive."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dagster_eventhub_ingest.resources.spark import class_preload
from dagster_eventhub_ingest.resources.spark.class_preload import (
    CLASS_LIST,
    DONE_PROPERTY,
    JAVA_DIR,
    preload_java_options,
)
from dagster_eventhub_ingest.resources.spark.kind import SPARK_CONF_DIR
from dagster_eventhub_ingest.resources.spark.session import owns_driver_classes, session_defaults

ROOT = Path(__file__).resolve().parents[2]
LISTED = (JAVA_DIR / CLASS_LIST).read_text().split()

# A program that waits for the agent to be done and prints what it says (the JDK runs a source
# file as a program).
_WAIT = f"""
public class Wait {{
    public static void main(String[] args) throws Exception {{
        for (int i = 0; i < 6000 && System.getProperty("{DONE_PROPERTY}") == null; i++) {{
            Thread.sleep(10);
        }}
        System.out.println(System.getProperty("{DONE_PROPERTY}"));
    }}
}}
"""


def _spark_jars() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "jars" / "*")


def _agent(tmp_path: Path, names: list[str]) -> str:
    """What a JVM on Spark's jars says once the agent went through ``names``."""
    jar = class_preload.agent_jar({"EHINGEST_CACHE_DIR": str(tmp_path / "cache"), **os.environ})
    assert jar is not None
    listed = tmp_path / "classes.txt"
    listed.write_text("\n".join(names) + "\n")
    program = tmp_path / "Wait.java"
    program.write_text(_WAIT)
    done = subprocess.run(
        ["java", f"-javaagent:{jar}={listed}", "-cp", _spark_jars(), str(program)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_the_agent_loads_what_the_class_path_holds_and_skips_the_rest(tmp_path: Path) -> None:
    names = [*LISTED[:200], "org.apache.spark.NoSuchClass", "not a class name"]
    assert _agent(tmp_path, names) == "200 loaded, 2 missed"


def test_the_agent_gives_up_a_list_of_another_spark_s_classes(tmp_path: Path) -> None:
    names = [f"org.apache.spark.Gone{i}" for i in range(600)] + LISTED[:10]
    assert _agent(tmp_path, names) == "0 loaded, 501 missed, given up"


def test_the_preloader_is_added_only_to_a_driver_on_the_package_s_options_and_spark_s_jars(
    tmp_path: Path,
) -> None:
    env = {"EHINGEST_CACHE_DIR": str(tmp_path / "cache"), "PATH": os.environ["PATH"]}
    jar = class_preload.agent_jar(env)
    assert preload_java_options(env) == f"-javaagent:{jar}={JAVA_DIR / CLASS_LIST}"
    for value in ("off", "0", "false", "no"):
        assert preload_java_options({**env, "EHINGEST_JVM_PRELOAD": value}) == ""
    ours = session_defaults("local[2]")
    assert owns_driver_classes(ours, {})
    assert owns_driver_classes(ours, {"SPARK_CONF_DIR": str(SPARK_CONF_DIR)})
    # The user's own Java options, jars, class path or Spark conf directory.
    assert not owns_driver_classes({**ours, "spark.driver.extraJavaOptions": "-Xss4m"}, {})
    assert not owns_driver_classes({**ours, "spark.jars": "/opt/x.jar"}, {})
    assert not owns_driver_classes({**ours, "spark.driver.extraClassPath": "/opt/lib/*"}, {})
    assert not owns_driver_classes(ours, {"SPARK_CLASSPATH": "/opt/lib/*"})
    assert not owns_driver_classes(ours, {"SPARK_CONF_DIR": str(tmp_path)})


def test_a_host_without_javac_or_whose_compile_failed_starts_drivers_without_it(
    tmp_path: Path,
) -> None:
    jre = tmp_path / "jre"
    (jre / "bin").mkdir(parents=True)
    (jre / "bin" / "java").write_text("#!/bin/sh\n")  # a JRE's: no javac beside it
    no_javac = {"EHINGEST_CACHE_DIR": str(tmp_path / "a"), "JAVA_HOME": str(jre)}
    assert class_preload.find_javac(no_javac) is None
    assert preload_java_options(no_javac) == ""
    assert not (tmp_path / "a").exists()  # nothing written
    failed = {"EHINGEST_CACHE_DIR": str(tmp_path / "b"), "PATH": os.environ["PATH"]}
    jar = class_preload.agent_jar(failed)
    assert jar is not None
    jar.unlink()
    jar.with_suffix(".failed").write_text("javac: error")
    assert preload_java_options(failed) == ""  # not compiled again on every run
    assert not jar.exists()


def test_a_cache_that_cannot_be_written_starts_drivers_without_it(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    env = {"EHINGEST_CACHE_DIR": str(blocker / "cache"), "PATH": os.environ["PATH"]}
    assert class_preload.agent_jar(env) is None
    assert preload_java_options(env) == ""


def test_javac_s_error_is_kept_beside_the_jar_it_did_not_build(tmp_path: Path) -> None:
    target = tmp_path / "preload" / "x.jar"
    with pytest.raises(RuntimeError, match=r"javac failed \(exit 1\); see .*x\.failed"):
        class_preload.build_jar(target, b"class Broken {", _which("javac"))
    assert "error" in target.with_suffix(".failed").read_text()
    assert not target.exists()
    assert [p.name for p in target.parent.iterdir()] == ["x.failed"]  # no build folder left


_SESSION = f"""
import time
from dagster_eventhub_ingest.resources.spark.session import local_spark_session
spark = local_spark_session("preload-test", master="local[1]")
assert spark.range(10).count() == 10
system = spark.sparkContext._jvm.java.lang.System
for _ in range(600):
    said = system.getProperty("{DONE_PROPERTY}")
    if said:
        break
    time.sleep(0.1)
print(said)
"""


@pytest.mark.spark
def test_a_driver_started_without_an_archive_loads_the_listed_classes_ahead(
    tmp_path: Path,
) -> None:
    env = {
        **os.environ,
        "EHINGEST_CACHE_DIR": str(tmp_path / "cache"),
        "EHINGEST_JVM_ARCHIVE": "off",
    }
    env.pop("SPARK_CONF_DIR", None)
    done = subprocess.run(
        [sys.executable, "-c", _SESSION],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    loaded, missed = (int(part.split()[0]) for part in done.stdout.strip().split(", "))
    # This Spark's own list: every name is on its class path.
    assert (loaded, missed) == (len(LISTED), 0), done.stdout


def _which(name: str) -> str:
    import shutil

    found = shutil.which(name)
    assert found is not None, name
    return found
