"""The local driver JVM's class-data archive (dagster_eventhub_ingest.resources.jvm_archive): when
it is planned, used or written, how a JVM that refuses it is restarted, how an archive is put in
place; then real JVMs (``ehingest spark-archive``, a session mapping the archive, a user's conf
dir)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dagster_eventhub_ingest.resources import jvm_archive
from dagster_eventhub_ingest.resources.jvm_archive import (
    ArchivePlan,
    finish_dump,
    plan_archive,
    start_with_archive,
)
from dagster_eventhub_ingest.resources.spark.session import SPARK_CONF_DIR, driver_environment

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
LOG4J = SPARK_CONF_DIR / "log4j2.properties"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        "EHINGEST_CACHE_DIR": str(tmp_path / "cache"),
        "PATH": os.environ["PATH"],
        "SPARK_CONF_DIR": str(SPARK_CONF_DIR),
    }
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    env.update(extra)
    return env


def _plan(env: dict[str, str], options: str = OPTIONS, **conf: str) -> ArchivePlan | None:
    return plan_archive(options, conf, log4j_config=LOG4J, default_conf_dir=SPARK_CONF_DIR, env=env)


def test_the_first_jvm_without_an_archive_only_notes_it_the_second_writes_it(
    tmp_path: Path,
) -> None:
    """Writing costs the run that does it ~20 s: only once the cache has outlived a run."""
    assert _plan(_env(tmp_path)) is None
    assert list((tmp_path / "cache" / "jvm").glob("spark-*.wanted"))
    plan = _plan(_env(tmp_path))
    assert plan is not None and plan.dump_to is not None
    assert _plan(_env(tmp_path / "fresh", EHINGEST_JVM_ARCHIVE="rebuild")) is not None


def _wanted(tmp_path: Path) -> dict[str, str]:
    """The environment of a cache that has already seen a run wanting the archive."""
    env = _env(tmp_path)
    _plan(env)
    return env


def test_without_an_archive_the_jvm_writes_one_to_a_temporary_name(tmp_path: Path) -> None:
    plan = _plan(_wanted(tmp_path))
    assert plan is not None and plan.dump_to is not None
    directory = tmp_path / "cache" / "jvm"
    assert plan.archive.parent == directory and plan.dump_to.parent == directory
    assert plan.dump_to.name.startswith(plan.archive.name) and plan.dump_to.suffix == ".tmp"
    assert f"-XX:ArchiveClassesAtExit={plan.dump_to}" in plan.java_options
    assert f"-Dlog4j2.configurationFile={LOG4J.resolve().as_uri()}" in plan.java_options
    assert plan.conf_dir == directory / "conf" and list(plan.conf_dir.iterdir()) == []


def test_with_an_archive_the_jvm_maps_it_unless_asked_to_rebuild(tmp_path: Path) -> None:
    first = _plan(_wanted(tmp_path))
    assert first is not None
    first.archive.write_bytes(b"archive")
    plan = _plan(_env(tmp_path))
    assert plan is not None and plan.dump_to is None and plan.archive == first.archive
    assert f"-XX:SharedArchiveFile={first.archive}" in plan.java_options
    assert "ArchiveClassesAtExit" not in plan.java_options
    rebuild = _plan(_env(tmp_path, EHINGEST_JVM_ARCHIVE="rebuild"))
    assert rebuild is not None and rebuild.dump_to is not None


@pytest.mark.parametrize(
    ("env", "options", "conf"),
    [
        ({"EHINGEST_JVM_ARCHIVE": "off"}, OPTIONS, {}),
        ({"SPARK_CONF_DIR": "/etc/spark/conf"}, OPTIONS, {}),
        ({"HADOOP_CONF_DIR": "/etc/hadoop"}, OPTIONS, {}),
        ({"SPARK_DIST_CLASSPATH": "/opt/extra/*"}, OPTIONS, {}),
        ({}, OPTIONS, {"spark.driver.extraClassPath": "/opt/lib/x.jar"}),
        ({}, "-Xshare:off", {}),
        ({}, "-XX:SharedArchiveFile=/opt/mine.jsa", {}),
        ({"JAVA_HOME": "/nonexistent", "PATH": "/nonexistent"}, OPTIONS, {}),
    ],
    ids=[
        "switched-off",
        "users-conf-dir",
        "hadoop-conf-dir",
        "dist-classpath",
        "extra-class-path",
        "sharing-off",
        "own-archive",
        "no-java",
    ],
)
def test_what_rules_the_archive_out(
    tmp_path: Path, env: dict[str, str], options: str, conf: dict[str, str]
) -> None:
    # rebuild: a plan to write one whatever the cache has seen, unless something rules it out.
    assert _plan(_env(tmp_path, EHINGEST_JVM_ARCHIVE="rebuild"), OPTIONS) is not None
    assert (
        _plan(_env(tmp_path, **{"EHINGEST_JVM_ARCHIVE": "rebuild", **env}), options, **conf) is None
    )


def test_a_non_empty_conf_dir_of_ours_rules_it_out(tmp_path: Path) -> None:
    plan = _plan(_wanted(tmp_path))
    assert plan is not None
    (plan.conf_dir / "spark-defaults.conf").write_text("spark.x 1\n")
    assert _plan(_env(tmp_path)) is None


def test_the_key_follows_jvm_flags_and_heap_not_system_properties(tmp_path: Path) -> None:
    def name(options: str = OPTIONS, **conf: str) -> str:
        plan = _plan(_env(tmp_path, EHINGEST_JVM_ARCHIVE="rebuild"), options, **conf)
        assert plan is not None
        return plan.archive.name

    base = name()
    assert name(f"{OPTIONS} -Dderby.system.home=/tmp/w1/_derby") == base
    assert name(f"{OPTIONS} -Dderby.system.home=/tmp/w2/_derby") == base
    assert name("-XX:TieredStopAtLevel=1 -XX:+UseG1GC") != base
    assert name(**{"spark.driver.memory": "48g"}) != base
    other = _plan(_env(tmp_path, EHINGEST_JVM_ARCHIVE="rebuild", SPARK_SUBMIT_OPTS="-Xmx40g"))
    assert other is not None and other.archive.name != base


def test_stale_temporary_archives_are_removed_fresh_ones_kept(tmp_path: Path) -> None:
    plan = _plan(_wanted(tmp_path))
    assert plan is not None
    stale = plan.archive.parent / f"{plan.archive.name}.1-dead.tmp"
    fresh = plan.archive.parent / f"{plan.archive.name}.2-live.tmp"
    stale.write_bytes(b"half")
    fresh.write_bytes(b"half")
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    _plan(_env(tmp_path))
    assert not stale.exists() and fresh.exists()


def test_a_jvm_that_refuses_the_options_is_started_again_without_them(tmp_path: Path) -> None:
    env = _wanted(tmp_path)
    plan = _plan(env)
    assert plan is not None
    calls: list[ArchivePlan | None] = []
    conf_dirs: list[str] = []

    def start(with_plan: ArchivePlan | None) -> str:
        calls.append(with_plan)
        # What the JVM's launch gets (resources/spark/session.py), never this process's.
        conf_dir = with_plan.conf_dir if with_plan else None
        launch = driver_environment(local=True, conf_dir=conf_dir, base=env)
        conf_dirs.append(launch["SPARK_CONF_DIR"])
        if with_plan is not None:
            raise RuntimeError("Java gateway process exited before sending its port number")
        return "session"

    before = dict(env)
    assert start_with_archive(plan, start) == "session"
    assert calls == [plan, None]
    assert conf_dirs == [str(plan.conf_dir), str(SPARK_CONF_DIR)]
    assert env == before
    assert plan.marker.exists()
    assert _plan(env) is None  # never tried again for this key


def test_a_jvm_that_cannot_start_at_all_raises_its_own_error(tmp_path: Path) -> None:
    env = _wanted(tmp_path)
    plan = _plan(env)

    def start(with_plan: ArchivePlan | None) -> str:
        raise RuntimeError("JAVA_HOME is not set")

    with pytest.raises(RuntimeError, match="JAVA_HOME"):
        start_with_archive(plan, start)
    assert plan is not None and not plan.marker.exists()  # the archive was not the problem


def _jvm_like(tmp_path: Path, dump_to: Path, code: int) -> subprocess.Popen[bytes]:
    """A process that, like the gateway JVM, ends when its stdin closes and writes the archive
    while it exits (with ``code``)."""
    script = (
        "import sys, time; sys.stdin.read(); time.sleep(0.3); "
        f"open({str(dump_to)!r}, 'wb').write(b'archive'); sys.exit({code})"
    )
    return subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE)


@pytest.mark.parametrize("code", [0, 1])
def test_the_archive_is_put_in_place_only_after_a_clean_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    plan = _plan(_wanted(tmp_path))
    assert plan is not None and plan.dump_to is not None
    proc = _jvm_like(tmp_path, plan.dump_to, code)
    monkeypatch.setattr(jvm_archive, "gateway_process", lambda: proc)
    assert finish_dump(plan) is (code == 0)
    assert proc.returncode == code  # it was made to exit and waited for
    assert plan.archive.exists() is (code == 0)
    assert not plan.dump_to.exists()


# -- real JVMs ------------------------------------------------------------------------------

_SESSION = """
import os, sys
from dagster_eventhub_ingest.resources.spark.session import local_spark_session
spark = local_spark_session("archive-test", master="local[1]")
assert spark.range(100).selectExpr("sum(id)").first()[0] == 4950
pid = spark.sparkContext._gateway.proc.pid
maps = open(f"/proc/{pid}/maps").read()
print("MAPPED" if os.environ["EHINGEST_CACHE_DIR"] in maps else "NOT-MAPPED")
"""


def _run(args: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    full = {**os.environ, **env}
    full.pop("SPARK_CONF_DIR", None)
    if "SPARK_CONF_DIR" in env:
        full["SPARK_CONF_DIR"] = env["SPARK_CONF_DIR"]
    return subprocess.run(args, cwd=ROOT, env=full, capture_output=True, text=True, timeout=timeout)


@pytest.mark.spark
@pytest.mark.slow
def test_spark_archive_writes_the_archive_a_session_then_maps(tmp_path: Path) -> None:
    env = {"EHINGEST_CACHE_DIR": str(tmp_path / "cache"), "EHINGEST_JVM_ARCHIVE": "auto"}
    cli = [sys.executable, "-m", "dagster_eventhub_ingest.cli.main", "spark-archive"]
    first = _run(cli, env)
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.stdout.startswith("wrote ") and ".jsa" in first.stdout
    archives = list((tmp_path / "cache" / "jvm").glob("spark-*.jsa"))
    assert len(archives) == 1 and archives[0].stat().st_size > 10 * 2**20
    assert not list((tmp_path / "cache" / "jvm").glob("*.tmp"))
    again = _run(cli, env)
    assert again.returncode == 0 and again.stdout.startswith("up to date: "), again.stderr
    used = _run([sys.executable, "-c", _SESSION], env)
    assert used.returncode == 0, used.stderr[-3000:]
    assert "MAPPED" in used.stdout.split()
    # The package's quiet log4j2 config still applies (passed as a system property now).
    assert " INFO " not in used.stderr and "default log4j profile" not in used.stderr
    # A damaged archive: the JVM starts without it; it is removed and not written again.
    archive = archives[0]
    archive.chmod(0o644)
    with archive.open("r+b") as f:
        f.write(b"\0" * 4096)
    damaged = _run([sys.executable, "-c", _SESSION], env)
    assert damaged.returncode == 0, damaged.stderr[-3000:]
    assert "NOT-MAPPED" in damaged.stdout.split()
    assert "did not use its class-data archive" in damaged.stderr
    assert not archive.exists() and archive.with_suffix(".unusable").exists()


@pytest.mark.spark
def test_a_users_spark_conf_dir_keeps_its_place_and_no_archive_is_used(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "log4j2.properties").write_text(LOG4J.read_text())
    env: dict[str, Any] = {
        "EHINGEST_CACHE_DIR": str(tmp_path / "cache"),
        "EHINGEST_JVM_ARCHIVE": "auto",
        "SPARK_CONF_DIR": str(conf),
    }
    used = _run([sys.executable, "-c", _SESSION], env)
    assert used.returncode == 0, used.stderr[-3000:]
    assert "NOT-MAPPED" in used.stdout.split()
    assert not (tmp_path / "cache" / "jvm").exists()


def test_another_install_of_the_same_spark_gets_its_own_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The JVM checks an archive against the class path it was written with (absolute jar
    paths): a second virtualenv must not find the first one's and silently never use one."""
    import pyspark

    env = _env(tmp_path, EHINGEST_JVM_ARCHIVE="rebuild")
    here = _plan(env)
    other = tmp_path / "other-venv" / "pyspark"
    (other / "jars").mkdir(parents=True)
    for jar in (Path(pyspark.__file__).parent / "jars").iterdir():
        (other / "jars" / jar.name).write_bytes(b"")
        os.truncate(other / "jars" / jar.name, jar.stat().st_size)  # same names and sizes
    monkeypatch.setattr(pyspark, "__file__", str(other / "__init__.py"))
    there = _plan(env)
    assert here is not None and there is not None
    assert here.archive != there.archive


@pytest.mark.parametrize("mapped", [True, False])
def test_an_archive_the_jvm_did_not_map_is_removed_and_not_written_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mapped: bool
) -> None:
    env = _wanted(tmp_path)
    written = _plan(env)
    assert written is not None
    written.archive.write_bytes(b"archive")
    plan = _plan(env)
    assert plan is not None and plan.dump_to is None
    monkeypatch.setattr(jvm_archive, "_mapped", lambda archive: mapped)
    monkeypatch.setattr(jvm_archive, "_CURRENT", None)  # restored after the test
    assert start_with_archive(plan, lambda with_plan: "session") == "session"
    assert plan.archive.exists() is mapped
    assert plan.marker.exists() is not mapped
    assert (jvm_archive.current_plan() == plan) is mapped
