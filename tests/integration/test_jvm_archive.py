"""The local driver JVM's class-data archive (dagster_eventhub_ingest.resources.spark.jvm_archive):
when it is planned, used or written, how a JVM that refuses it is restarted, how an archive is put
in place; then real JVMs (``ehingest spark-archive``, a session mapping the archive, a user's conf
dir)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dagster_eventhub_ingest.resources.spark import jvm_archive, jvm_cache
from dagster_eventhub_ingest.resources.spark.jvm_archive import (
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


def test_by_default_a_run_without_an_archive_writes_none_and_starts_nothing(
    tmp_path: Path,
) -> None:
    """Nothing a run starts outlives it unless the host asks for the writer (``auto``)."""
    conf = {"spark.driver.memory": "2g", "spark.master": "local[2]"}
    assert _plan(_env(tmp_path), **conf) is None
    assert _plan(_env(tmp_path, EHINGEST_JVM_ARCHIVE="use"), **conf) is None
    assert not list((tmp_path / "cache" / "jvm").glob("spark-*"))


def test_no_run_writes_the_archive_with_auto_it_is_built_after_it_exits(tmp_path: Path) -> None:
    """Writing costs ~20 s: never on a run's time."""
    conf = {"spark.driver.memory": "2g", "spark.master": "local[2]"}
    plan = _plan(_env(tmp_path, EHINGEST_JVM_ARCHIVE="auto"), **conf)
    assert plan is not None and plan.build_later and plan.dump_to is None
    assert "ArchiveClassesAtExit" not in plan.java_options
    # What the builder needs to write the archive this run would map: the same key.
    assert dict(plan.settings) == {
        "spark.master": "local[2]",
        "spark.driver.memory": "2g",
        "spark.driver.extraJavaOptions": OPTIONS,
    }
    written = _plan(_env(tmp_path, EHINGEST_JVM_ARCHIVE="write"), **{"spark.driver.memory": "2g"})
    assert written is not None and written.archive == plan.archive
    assert _plan(_env(tmp_path / "fresh", EHINGEST_JVM_ARCHIVE="rebuild")) is not None


def test_a_build_later_plan_starts_the_jvm_as_without_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jvm_archive, "_LATER", [])
    plan = _plan(_env(tmp_path, EHINGEST_JVM_ARCHIVE="auto"))
    assert plan is not None and plan.build_later
    calls: list[ArchivePlan | None] = []

    def start(with_plan: ArchivePlan | None) -> str:
        calls.append(with_plan)
        return "session"

    assert start_with_archive(plan, start) == "session"
    assert calls == [None]
    assert [plan] == jvm_archive._LATER  # a builder is started at interpreter exit


def _writer_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a writer (``ehingest spark-archive``, its builder, ``write``)."""
    return _env(tmp_path, EHINGEST_JVM_ARCHIVE="write")


def test_without_an_archive_the_jvm_writes_one_to_a_temporary_name(tmp_path: Path) -> None:
    plan = _plan(_writer_env(tmp_path))
    assert plan is not None and plan.dump_to is not None
    directory = tmp_path / "cache" / "jvm"
    assert plan.archive.parent == directory and plan.dump_to.parent == directory
    assert plan.dump_to.name.startswith(plan.archive.name) and plan.dump_to.suffix == ".tmp"
    assert f"-XX:ArchiveClassesAtExit={plan.dump_to}" in plan.java_options
    assert f"-Dlog4j2.configurationFile={LOG4J.resolve().as_uri()}" in plan.java_options
    assert plan.conf_dir == directory / "conf" and list(plan.conf_dir.iterdir()) == []


def test_with_an_archive_the_jvm_maps_it_unless_asked_to_rebuild(tmp_path: Path) -> None:
    first = _plan(_writer_env(tmp_path))
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
    plan = _plan(_writer_env(tmp_path))
    assert plan is not None
    (plan.conf_dir / "spark-defaults.conf").write_text("spark.x 1\n")
    assert _plan(_env(tmp_path)) is None


def test_the_key_follows_jvm_flags_heap_and_class_path_not_system_properties(
    tmp_path: Path,
) -> None:
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
    # The jars put before Spark's: the JVM maps an archive only for the class path it was
    # written with.
    env = _env(tmp_path, EHINGEST_JVM_ARCHIVE="rebuild")
    first = plan_archive(
        OPTIONS,
        {},
        log4j_config=LOG4J,
        default_conf_dir=SPARK_CONF_DIR,
        env=env,
        class_path="/a.jar",
    )
    assert first is not None and first.archive.name != base


def test_a_jvm_that_refuses_the_options_is_started_again_without_them(tmp_path: Path) -> None:
    env = _writer_env(tmp_path)
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
    env = _writer_env(tmp_path)
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
    plan = _plan(_writer_env(tmp_path))
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
command = open(f"/proc/{pid}/cmdline").read().split(chr(0))
print("UNVERIFIED" if "-XX:-BytecodeVerificationRemote" in command else "VERIFIED")
print("PRELOADS" if any(a.startswith("-javaagent:") for a in command) else "NO-PRELOAD")
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
    env = {
        "EHINGEST_CACHE_DIR": str(tmp_path / "cache"),
        "EHINGEST_JVM_ARCHIVE": "auto",
        "EHINGEST_JVM_SKIP_VERIFY": "on",
    }
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
    # Skipping was asked for, but the archive's classes were verified when it was written.
    assert "VERIFIED" in used.stdout.split()
    # Its classes are mapped: nothing to load ahead.
    assert "NO-PRELOAD" in used.stdout.split()
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
        "EHINGEST_JVM_SKIP_VERIFY": "on",
        "SPARK_CONF_DIR": str(conf),
    }
    used = _run([sys.executable, "-c", _SESSION], env)
    assert used.returncode == 0, used.stderr[-3000:]
    assert "NOT-MAPPED" in used.stdout.split()
    assert "VERIFIED" in used.stdout.split()  # asked to skip, but its spark-defaults may add jars
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
    env = _writer_env(tmp_path)
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


# -- a bounded cache, safe with many processes -------------------------------------------------


def _aged(path: Path, seconds: float, content: bytes = b"") -> Path:
    path.write_bytes(content)
    then = time.time() - seconds
    os.utime(path, (then, then))
    return path


def test_the_cache_keeps_the_most_recently_used_archives_and_drops_old_notes(
    tmp_path: Path,
) -> None:
    env = _env(tmp_path, EHINGEST_JVM_ARCHIVE="write")
    plan = _plan(env)
    assert plan is not None
    directory = plan.archive.parent
    _aged(plan.archive, 30 * 86400, b"mine")  # old, but the one this run maps
    others = [_aged(directory / f"spark-{i:020d}.jsa", 3600 * (i + 1)) for i in range(4)]
    gone = _aged(directory / "spark-old.jsa", 20 * 86400)
    notes = [_aged(directory / f"spark-old.{s}", 20 * 86400) for s in ("wanted", "unusable")]
    fresh_note = _aged(directory / "spark-new.unusable", 60)
    used = _plan(_env(tmp_path))
    assert used is not None and used.archive == plan.archive and used.dump_to is None
    left = sorted(p.name for p in directory.glob("*.jsa"))
    assert left == sorted([plan.archive.name, others[0].name, others[1].name])
    assert len(left) == jvm_cache.KEEP_ARCHIVES
    assert not gone.exists() and not any(n.exists() for n in notes) and fresh_note.exists()
    assert time.time() - plan.archive.stat().st_mtime < 60  # mapping it marks it used


_HOLD = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("locked", flush=True)
sys.stdin.read()
"""


def _holding(lock: Path) -> subprocess.Popen[str]:
    """Another process holding ``lock`` until its stdin closes (a writer at work)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(lock)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_orphaned_dumps_are_removed_a_live_writers_kept(tmp_path: Path) -> None:
    plan = _plan(_writer_env(tmp_path))
    assert plan is not None
    directory = plan.archive.parent
    live = directory / f"{plan.archive.name}.1-live.tmp"
    orphan = directory / "spark-00000000000000000000.jsa.2-dead.tmp"
    live.write_bytes(b"half")
    orphan.write_bytes(b"half")  # fresh, but nobody holds its key's lock: its writer died
    writer = _holding(plan.lock)
    try:
        _plan(_env(tmp_path))
        assert live.exists() and not orphan.exists()
    finally:
        assert writer.stdin is not None
        writer.stdin.close()
        writer.wait(30)
    _plan(_env(tmp_path))  # the writer died without renaming: its dump is an orphan now
    assert not live.exists()


_WRITER = """
import subprocess, sys
from pathlib import Path
from dagster_eventhub_ingest.resources.spark import jvm_archive
from dagster_eventhub_ingest.resources.spark.session import SPARK_CONF_DIR

plan = jvm_archive.plan_archive(
    sys.argv[1], {}, log4j_config=SPARK_CONF_DIR / "log4j2.properties",
    default_conf_dir=SPARK_CONF_DIR,
)
jvm = None

def start(with_plan):
    global jvm
    if with_plan is None:
        return "PLAIN"
    # Stands in for the JVM: ends when its stdin closes, writing the archive as it exits.
    code = "import sys; sys.stdin.read(); open(sys.argv[1], 'wb').write(b'archive' * 1000)"
    jvm = subprocess.Popen([sys.executable, "-c", code, str(with_plan.dump_to)],
                           stdin=subprocess.PIPE)
    return "DUMP"

print(jvm_archive.start_with_archive(plan, start), flush=True)
jvm_archive.gateway_process = lambda: jvm
sys.stdin.read()  # the run's work
print(jvm_archive.finish_dumps(), flush=True)
"""


def test_many_writers_at_once_one_writes_the_others_start_without(tmp_path: Path) -> None:
    env = _writer_env(tmp_path)  # the environment the key is computed from, and only it
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, OPTIONS],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        for _ in range(4)
    ]
    try:
        started = [p.stdout.readline().strip() for p in procs if p.stdout is not None]
        assert sorted(started) == ["DUMP", "PLAIN", "PLAIN", "PLAIN"]
    finally:
        outs = [p.communicate("", timeout=60)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(".jsa" in out for out in outs) == 1  # the one writer put it in place
    plan = _plan(_env(tmp_path))
    assert plan is not None and plan.dump_to is None and plan.archive.stat().st_size == 7000
    assert not list(plan.archive.parent.glob("*.tmp"))


def test_no_builder_starts_while_a_writer_is_at_it(tmp_path: Path) -> None:
    later = _plan(_env(tmp_path, EHINGEST_JVM_ARCHIVE="auto"))
    assert later is not None and later.build_later
    writer = _holding(later.lock)
    try:
        assert jvm_archive.spawn_builder(later, _env(tmp_path)) is None
    finally:
        assert writer.stdin is not None
        writer.stdin.close()
        writer.wait(30)
    later.archive.write_bytes(b"archive")
    assert jvm_archive.spawn_builder(later, _env(tmp_path)) is None  # nothing left to do


def test_the_builder_holds_the_lock_from_the_moment_it_is_started(tmp_path: Path) -> None:
    """Many runs exiting at once start one builder: the lock passes to it at its spawn, not
    once it has imported enough to take it."""
    import signal

    env = _env(tmp_path, EHINGEST_JVM_ARCHIVE="auto")
    later = _plan(env)
    assert later is not None and later.build_later
    proc = jvm_archive.spawn_builder(later, {**os.environ, **env})
    assert proc is not None
    try:
        assert jvm_cache.ArchiveLock.take(later.lock) is None  # held by the builder already
        assert jvm_archive.spawn_builder(later, {**os.environ, **env}) is None
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session and process group
        proc.wait(30)
    lock = jvm_cache.ArchiveLock.take(later.lock)  # the kernel freed it with the builder
    assert lock is not None
    lock.release()


@pytest.mark.parametrize("mode", ["auto", "write", "rebuild", "use"])
def test_a_cache_that_cannot_be_written_starts_the_jvm_as_before(tmp_path: Path, mode: str) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory would be")
    env = _env(tmp_path, EHINGEST_CACHE_DIR=str(blocker / "cache"), EHINGEST_JVM_ARCHIVE=mode)
    for _ in range(2):
        assert _plan(env) is None
    assert start_with_archive(None, lambda p: p) is None
    assert jvm_cache.tidy(blocker / "cache" / "jvm") == []


def _builders(cache: Path) -> list[Any]:
    """The archive builders running for ``cache`` (only those)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline", "environ"]):
        try:
            env = proc.info["environ"] or {}
            if "--background" in (proc.info["cmdline"] or []) and env.get(
                "EHINGEST_CACHE_DIR"
            ) == str(cache):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _kill_builders(cache: Path) -> None:
    """Ends the archive builders of ``cache`` with what they started."""
    import psutil

    for proc in _builders(cache):
        try:
            for p in [*proc.children(recursive=True), proc]:
                p.kill()
        except psutil.Error:
            continue


@pytest.mark.spark
@pytest.mark.slow
def test_a_run_has_the_archive_built_after_it_exits_and_the_next_run_maps_it(
    tmp_path: Path,
) -> None:
    """The first run on a host starts without an archive and does not wait for one: a
    detached builder, holding the archive's lock, writes it once that run's process is gone,
    and the runs after map it.

    The builder runs at the lowest priority, in a session (and so an autogroup) of its own: on
    a saturated machine (CI) it may not get a core for many minutes. So once the run has shown
    it started one, the test ends it and runs the same builder command in the test's session,
    with the settings the run passes it."""
    from dagster_eventhub_ingest.resources.spark.session import LOCAL_DRIVER_JAVA_OPTIONS

    cache = tmp_path / "cache"
    env = {"EHINGEST_CACHE_DIR": str(cache), "EHINGEST_JVM_ARCHIVE": "auto"}
    try:
        run = _run([sys.executable, "-c", _SESSION], env)
        assert run.returncode == 0, run.stderr[-3000:]
        assert "NOT-MAPPED" in run.stdout.split()
        # The run's process has exited; its builder was started, detached, with the lock.
        log = next((cache / "jvm").glob("spark-*.log"))
        archive, lock = log.with_suffix(".jsa"), log.with_suffix(".lock")
        assert not archive.exists()  # the run did not wait for it
        assert jvm_cache.ArchiveLock.take(lock) is None
        builders = _builders(cache)
        assert len(builders) == 1
        _kill_builders(cache)
        for proc in builders:
            proc.wait(30)
        # The plan's settings: _SESSION's master and the local driver's default Java options.
        settings = {
            "spark.master": "local[1]",
            "spark.driver.extraJavaOptions": LOCAL_DRIVER_JAVA_OPTIONS,
        }
        builder = subprocess.run(
            [sys.executable, *jvm_archive.BUILDER_COMMAND],
            input=json.dumps(settings),
            cwd=ROOT,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert builder.returncode == 0, builder.stderr[-3000:]
        assert builder.stdout.startswith(f"wrote {archive} "), builder.stdout
        assert not list((cache / "jvm").glob("*.tmp"))
        used = _run([sys.executable, "-c", _SESSION], env)
        assert used.returncode == 0, used.stderr[-3000:]
        assert "MAPPED" in used.stdout.split()
        assert not _builders(cache)  # the archive was there: no builder this time
    finally:
        _kill_builders(cache)


@pytest.mark.spark
def test_spark_archive_says_when_the_cache_cannot_be_written(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    cli = [sys.executable, "-m", "dagster_eventhub_ingest.cli.main", "spark-archive"]
    done = _run(cli, {"EHINGEST_CACHE_DIR": str(blocker / "cache")})
    assert done.returncode != 0
    assert f"cannot write {blocker / 'cache' / 'jvm'}" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.spark
@pytest.mark.parametrize("skip", ["default", "on"])
def test_without_an_archive_the_local_driver_skips_verifying_spark_s_classes_if_asked(
    tmp_path: Path, skip: str
) -> None:
    """A JVM that loads Spark's classes from the jars verifies them unless
    ``EHINGEST_JVM_SKIP_VERIFY=on``; the session works either way."""
    env = {"EHINGEST_CACHE_DIR": str(tmp_path / "cache"), "EHINGEST_JVM_ARCHIVE": "off"}
    if skip == "on":
        env["EHINGEST_JVM_SKIP_VERIFY"] = "on"
    used = _run([sys.executable, "-c", _SESSION], env)
    assert used.returncode == 0, used.stderr[-3000:]
    said = used.stdout.split()
    assert "NOT-MAPPED" in said
    assert ("UNVERIFIED" if skip == "on" else "VERIFIED") in said
    assert "PRELOADS" in said  # and its classes load ahead either way (test_class_preload.py)


def test_verification_is_skipped_only_for_spark_s_own_jars_and_the_package_s_options(
    tmp_path: Path,
) -> None:
    from dagster_eventhub_ingest.resources.spark.session import session_defaults, verifies_classes

    ours = session_defaults("local[2]")
    on = {"EHINGEST_JVM_SKIP_VERIFY": "on"}
    assert verifies_classes(ours, {})  # by default
    assert not verifies_classes(ours, on)
    assert not verifies_classes(ours, {**on, "SPARK_CONF_DIR": str(SPARK_CONF_DIR)})
    # The user's own: Java options, jars, a class path, a Spark conf directory.
    assert verifies_classes({**ours, "spark.driver.extraJavaOptions": "-Xss4m"}, on)
    assert verifies_classes({**ours, "spark.jars": "/opt/x.jar"}, on)
    assert verifies_classes({**ours, "spark.jars.packages": "io.delta:delta-spark_2.13:4.0.0"}, on)
    assert verifies_classes({**ours, "spark.driver.extraClassPath": "/opt/lib/*"}, on)
    assert verifies_classes(ours, {**on, "SPARK_CLASSPATH": "/opt/lib/*"})
    assert verifies_classes(ours, {**on, "SPARK_CONF_DIR": str(tmp_path)})
    for value in ("off", "0", "false", "no", ""):
        assert verifies_classes(ours, {"EHINGEST_JVM_SKIP_VERIFY": value})
