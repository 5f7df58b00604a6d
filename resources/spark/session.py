"""The SparkSession the CLI, tests, Dagster's local runs and benchmarks use; local or not.

:func:`spark_session` starts a quiet local session (``local[...]``), a session on a cluster
(``spark://``, ``yarn``, ``k8s://``) or a Spark Connect session (``sc://host:port``). Local pins
(loopback driver, this interpreter for executors) apply to local masters only: on a cluster the
driver host and the executors' Python come from the user's environment and Spark config.

A deployment may build its own session (``SparkSession.builder`` or dagster-pyspark's
``PySparkResource``, ``spark.remote`` included); registering the ``eventhubs`` source
(:func:`dagster_eventhub_ingest.resources.eventhubs_source.register_eventhubs_source`) also
ships the project's code to non-local sessions
(:mod:`dagster_eventhub_ingest.resources.spark.code_shipping`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from dagster_eventhub_ingest.resources.spark.jvm_cache import switched_on
from dagster_eventhub_ingest.resources.spark.kind import (
    DEFAULT_SPARK_MASTER,
    SPARK_CONF_DIR,
    is_local_master,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from dagster_eventhub_ingest.resources.spark.jvm_archive import ArchivePlan

__all__ = [
    "SKIP_VERIFY_ENV",
    "SPARK_CONF_DIR",
    "UNVERIFIED_JAVA_OPTIONS",
    "driver_environment",
    "join_preparations",
    "local_spark_session",
    "make_active",
    "owns_driver_classes",
    "spark_session",
    "start_classic_driver",
    "verifies_classes",
]


#: What every session of a run gets unless the user's conf overrides it (Spark Connect
#: included: a client may set session settings): UTC timestamps, a shuffle sized for batches,
#: and partitioned writes (the sinks partition by batch key) that stream into an open file per
#: partition value instead of first sorting each task's rows by it; a task holds one batch
#: key, so this removes a sort (and its spill) after every read. Past 2 open files in a task
#: Spark falls back to the sort. Parquet timestamps (``enqueuedTime``) are written as the
#: format's own microsecond timestamps rather than Spark's default INT96, which Parquet
#: deprecated: every reader of today reads them (Spark, pyarrow, Trino, Delta), a table may
#: hold files of both, and the conversion is ~0.6 us of JVM CPU per event less.
SESSION_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.maxConcurrentOutputFileWriters": "2",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}
#: What a classic session (local or cluster) gets besides: no web UI (batches do not need it;
#: it binds a port) and no console progress bars (they garble captured logs).
CLASSIC_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}
#: Where a local driver binds (``SPARK_LOCAL_IP`` replaces it).
LOOPBACK = "127.0.0.1"
#: What a local master gets besides: the driver binds loopback, never a public address.
LOCAL_PINS: dict[str, str] = {
    "spark.driver.host": LOOPBACK,
    "spark.driver.bindAddress": LOOPBACK,
}


#: A local driver is one batch's JVM, alive for seconds to minutes: the C1 compiler alone (C2
#: compiles hot code again, on the same cores the readers need, for gains a short job never
#: collects) and the serial collector (a small heap on one machine). Measured with
#: ``bench/ingest_throughput.py --hot 0 --modes ae`` on 2 cores: ``ehingest run`` cold over
#: 100k events 25.2 -> 19.0 s (CPU 36.5 -> 20.4 s), over 1M 43.4 -> 40.1 s (CPU 67.8 -> 55.2 s).
#: The first collection a growing class metadata space triggers is a full one, of the whole heap
#: (``Metadata GC Threshold``, at 21 MB by default): a run's driver loads the classes of its write
#: and read-back mid-run, which cost one such pause of 0.11-0.17 s per run; at 256 MB it never
#: comes (measured with a GC log over 3 cold ``ehingest run`` s of 100k events: pauses 575-664 ->
#: 459-537 ms, no full collection; the wall time moved inside its spread). It is a threshold,
#: not a reservation: metadata is still committed as classes load.
#: A ``spark.driver.extraJavaOptions`` in the user's conf replaces it.
LOCAL_DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:MetaspaceSize=256m"


#: What the local driver's JVM gets besides, when asked (``EHINGEST_JVM_SKIP_VERIFY=on``) and it
#: starts without a class-data archive: no bytecode verification of the classes it loads from
#: jars (an archive maps them already verified). It shortens a first run a little
#: (docs/benchmarks.md, "A fresh host"), not enough to give up a defence for every user by
#: default (docs/deploy.md).
#: Only for the JVM this package starts for a local master with Spark's own jars: not when the
#: user's conf or Spark conf directory sets Java options, adds jars or a class path
#: (:func:`verifies_classes`).
UNVERIFIED_JAVA_OPTIONS = (
    "-XX:+IgnoreUnrecognizedVMOptions -XX:+UnlockDiagnosticVMOptions "
    "-XX:-BytecodeVerificationRemote"
)
#: ``on`` (or ``1``, ``true``, ``yes``): a local driver's JVM without an archive skips verifying
#: Spark's classes (:data:`UNVERIFIED_JAVA_OPTIONS`).
SKIP_VERIFY_ENV = "EHINGEST_JVM_SKIP_VERIFY"
#: Settings that put other jars than Spark's on the driver's class path, besides the class path
#: settings of :func:`~dagster_eventhub_ingest.resources.spark.class_path.class_path_is_users`.
_JAR_SETTINGS = ("spark.jars", "spark.jars.packages", "spark.driver.userClassPathFirst")


def verifies_classes(settings: Mapping[str, str], env: Mapping[str, str] = os.environ) -> bool:
    """Whether a local driver's JVM started with ``settings`` and no class-data archive keeps
    bytecode verification: it goes without (:data:`UNVERIFIED_JAVA_OPTIONS`) only with
    ``EHINGEST_JVM_SKIP_VERIFY=on`` and :func:`owns_driver_classes`."""
    return not (switched_on(env.get(SKIP_VERIFY_ENV)) and owns_driver_classes(settings, env))


def owns_driver_classes(settings: Mapping[str, str], env: Mapping[str, str] = os.environ) -> bool:
    """Whether a local driver's JVM started with ``settings`` runs this package's Java options
    (:data:`LOCAL_DRIVER_JAVA_OPTIONS`) on Spark's own jars: no jars, class path or Spark conf
    directory of the user's."""
    from dagster_eventhub_ingest.resources.spark.class_path import class_path_is_users

    options = settings.get("spark.driver.extraJavaOptions", "")
    if not options.startswith(LOCAL_DRIVER_JAVA_OPTIONS):
        return False
    return not (class_path_is_users(settings, env) or any(settings.get(k) for k in _JAR_SETTINGS))


def session_defaults(master: str | None, remote: str | None = None) -> dict[str, str]:
    """The default settings of a session on ``master`` (or Spark Connect at ``remote``).

    The one list the CLI's session builder and Dagster's PySpark resource both start from.
    """
    if remote is not None:
        return dict(SESSION_CONF)
    out = {**SESSION_CONF, **CLASSIC_CONF}
    if is_local_master(master):
        out.update(LOCAL_PINS)
        out["spark.driver.extraJavaOptions"] = LOCAL_DRIVER_JAVA_OPTIONS
    return out


def spark_session(
    app_name: str,
    *,
    master: str | None = DEFAULT_SPARK_MASTER,
    remote: str | None = None,
    warehouse_dir: str | os.PathLike[str] | None = None,
    ui: bool = False,
    conf: Mapping[str, str] | None = None,
    register_source: bool = True,
) -> SparkSession:
    """A SparkSession on ``master`` (local by default) or on the Spark Connect URL ``remote``.

    Local masters get the loopback pins of :func:`local_spark_session`. Other masters get only
    the quiet defaults; ``remote`` gets the session settings Spark Connect lets a client set,
    in the server session that runs of the same code and settings share
    (:mod:`dagster_eventhub_ingest.resources.spark.connect_session`). ``master`` and
    ``remote`` are as :class:`dagster_eventhub_ingest.resources.config.SparkConfig` checked
    them (it is the one home of their rules and calls this from ``session_factory``); with
    ``remote`` the master is ignored.
    """
    if remote is not None:
        from dagster_eventhub_ingest.resources.spark.connect_session import connect_session

        settings = {"spark.app.name": app_name, **session_defaults(None, remote), **(conf or {})}
        spark = connect_session(remote, settings)
        if register_source:
            from dagster_eventhub_ingest.resources.eventhubs_source import register_eventhubs_source

            register_eventhubs_source(spark)
        return spark
    return local_spark_session(
        app_name,
        master=master or DEFAULT_SPARK_MASTER,
        warehouse_dir=warehouse_dir,
        ui=ui,
        conf=conf,
        register_source=register_source,
    )


def make_active(spark: SparkSession) -> None:
    """Make ``spark`` the active session of the calling thread.

    A classic session is active (JVM side, per thread) only in the thread that created it,
    and Spark resolves a Python data source named in ``df.write.format(...)`` through the
    calling thread's active session: a session started on another thread (the run's early
    start) would not find the Delta writer. Spark Connect sessions have no JVM here.
    """
    from dagster_eventhub_ingest.resources.spark.kind import is_connect_session

    if is_connect_session(spark):
        return
    jvm = spark._jvm
    assert jvm is not None
    jvm.SparkSession.setActiveSession(spark._jsparkSession)


def driver_environment(
    *,
    local: bool,
    conf_dir: Path | None = None,
    base: Mapping[str, str] = os.environ,
) -> dict[str, str]:
    """The environment a classic driver's JVM is launched with (this process's is left alone):
    ``base`` with, unless it sets them, ``PYSPARK_DRIVER_PYTHON`` (this interpreter) and
    ``SPARK_CONF_DIR`` (the package's quiet log4j2 config; ``conf_dir`` replaces it, the class-data
    archive's empty one); for a local master also ``SPARK_LOCAL_IP=127.0.0.1`` (the driver would
    otherwise bind a public address), ``PYSPARK_PYTHON`` (this interpreter: executors need its
    pyarrow and Azure SDK) and the worker site first on ``PYTHONPATH``
    (:mod:`dagster_eventhub_ingest.resources.spark.worker_python`). A cluster's executors keep the
    Python of the user's environment and Spark config.
    """
    from dagster_eventhub_ingest.resources.spark.worker_python import worker_pythonpath

    env = dict(base)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if conf_dir is not None:
        env["SPARK_CONF_DIR"] = str(conf_dir)
    else:
        env.setdefault("SPARK_CONF_DIR", str(SPARK_CONF_DIR))
    if local:
        env.setdefault("SPARK_LOCAL_IP", LOOPBACK)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        path = worker_pythonpath(env)
        if path is not None:
            env["PYTHONPATH"] = path
    return env


def _builder(settings: Mapping[str, str]) -> SparkSession.Builder:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder


def start_classic_driver(settings: Mapping[str, str]) -> SparkSession:
    """``getOrCreate()`` of a classic session with ``settings`` (``spark.master`` among them),
    whose JVM this package launches with :func:`driver_environment` when none is up yet; a
    local master's JVM starts from the class-data archive of
    :mod:`dagster_eventhub_ingest.resources.spark.jvm_archive` when one can be used (or written).

    A process whose JVM is already up (an earlier session), that ``spark-submit`` started
    (``PYSPARK_GATEWAY_PORT``), or on Windows, gets pyspark's own start as it is. A context
    created here for a local master runs its Python workers with :func:`driver_environment`'s
    ``PYSPARK_PYTHON``.
    """
    from pyspark import SparkContext

    from dagster_eventhub_ingest.resources.spark.class_path import (
        CLASS_PATH_SETTING,
        driver_class_path,
    )
    from dagster_eventhub_ingest.resources.spark.class_preload import preload_java_options
    from dagster_eventhub_ingest.resources.spark.jvm_archive import plan_archive, start_with_archive

    local = is_local_master(settings.get("spark.master"))
    java_options = settings.get("spark.driver.extraJavaOptions", "")
    with SparkContext._lock:
        if SparkContext._active_spark_context is not None:
            return _builder(settings).getOrCreate()
        if (
            SparkContext._gateway is not None
            or "PYSPARK_GATEWAY_PORT" in os.environ
            or os.name == "nt"
        ):
            return _own_python(_builder(settings).getOrCreate(), local)
        plan = None
        class_path = driver_class_path(settings) if local else None
        if local:
            plan = plan_archive(
                java_options,
                settings,
                log4j_config=SPARK_CONF_DIR / "log4j2.properties",
                default_conf_dir=SPARK_CONF_DIR,
                class_path=class_path or "",
            )

        def start(with_plan: ArchivePlan | None) -> SparkSession:
            from pyspark import SparkConf

            from dagster_eventhub_ingest.resources.spark.gateway import launch_gateway

            options = java_options
            if with_plan is not None:
                options = f"{java_options} {with_plan.java_options}"
            elif local and owns_driver_classes(settings):  # no archive: Spark's jars' classes
                if not verifies_classes(settings):
                    options = f"{options} {UNVERIFIED_JAVA_OPTIONS}"
                options = f"{options} {preload_java_options()}"
            chosen = {**settings, "spark.driver.extraJavaOptions": options.strip()}
            if class_path is not None:
                chosen[CLASS_PATH_SETTING] = class_path
            env = driver_environment(
                local=local, conf_dir=with_plan.conf_dir if with_plan else None
            )
            prepare = _SqlPreparation() if local else None
            if prepare is not None:
                prepare.start()
            try:
                gateway = launch_gateway(chosen, env)
                # The context first, with every setting (what the builder's getOrCreate would
                # create): the data source lookup may start beside the session only once it
                # runs.
                context = SparkContext(
                    conf=SparkConf().setAll(list(chosen.items())), gateway=gateway
                )
                if local and "PYSPARK_PYTHON" not in os.environ:
                    context.pythonExec = env["PYSPARK_PYTHON"]
                if prepare is not None:
                    prepare.context_ready.set()
                return _builder(chosen).getOrCreate()
            finally:
                if prepare is not None:
                    prepare.done.set()

        return start_with_archive(plan, start)


def _own_python(spark: SparkSession, local: bool) -> SparkSession:
    """A local context pyspark created here runs this interpreter's Python workers, unless the
    environment names one (``PYSPARK_PYTHON``)."""
    context = spark.sparkContext
    if local and "PYSPARK_PYTHON" not in os.environ and context.pythonExec == "python3":
        context.pythonExec = sys.executable
    return spark


class _SqlPreparation:
    """The first-time work of a new JVM's first SparkSession that does not need the session,
    on a thread of its own beside the driver's start, whose steps run one after another in a
    JVM that is mostly interpreting: on 2 cores one core is half idle meanwhile.

    * Once the JVM answers (while the SparkContext starts): Spark SQL's built-in function
      registry and its configuration's definitions, both initialised once per JVM (the
      session's state copies the registry; the session's settings look up the definitions).
    * Once the context runs (while the session is created): Spark's one-time lookup of Python
      data sources installed as ``pyspark_*`` modules (a Python daemon and a worker), which
      registering the ``eventhubs`` source would otherwise start and wait for; its result is
      kept for the JVM's life, the same for every session.
    * Then (while the run plans its read): one SQL expression of the shapes a write's batch
      key, range filter and statistics take (:data:`_PARSER_WARM_UP`), parsed and thrown away.
      Spark's SQL parser builds its grammar's tables on its first use and its prediction cache
      as it meets each shape, once per JVM for every parser: ~0.2 s of JVM CPU that the first
      ``F.expr`` of a write otherwise spends on the run's path (0.01 s after this).

    Best effort: a failure is logged at debug and the session does the same work itself.
    Measured (a cold process starting a local[2] session and its Python workers, 4 alternated
    runs against the start without it): the session ready at 1.97-2.25 s against 2.26-2.66 s
    (docs/deploy.md).
    """

    def __init__(self) -> None:
        import threading

        self.context_ready = threading.Event()
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ehingest-sql-prepare", daemon=True)

    def start(self) -> None:
        _PREPARING.add(self)
        self._thread.start()

    def join(self, timeout: float) -> None:
        """Wait for the preparation's JVM calls to end (before the JVM is ended under them)."""
        self.done.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            self._prepare()
        finally:
            _PREPARING.discard(self)

    def _prepare(self) -> None:
        import logging
        import time

        from pyspark import SparkContext

        log = logging.getLogger(__name__)
        while SparkContext._gateway is None and not self.done.is_set():
            time.sleep(0.005)
        gateway = SparkContext._gateway
        if gateway is None:
            return
        try:
            jvm = gateway.jvm
            jvm.org.apache.spark.sql.catalyst.analysis.FunctionRegistry.builtin()
            jvm.org.apache.spark.sql.internal.SQLConf.get()
            while not self.context_ready.wait(0.005):
                if self.done.is_set():
                    return
            # Any name: the lookup runs on the first question and keeps its answer.
            manager = jvm.org.apache.spark.sql.execution.datasources.DataSourceManager()
            manager.dataSourceExists("eventhubs")
            jvm.org.apache.spark.sql.execution.SparkSqlParser().parseExpression(_PARSER_WARM_UP)
        except Exception:
            log.debug("preparing Spark SQL beside the driver's start failed", exc_info=True)
        # py4j closes this thread's own connection when the thread ends (its thread-local
        # finalizer), as for any Python thread that called into the JVM.


#: What :class:`_SqlPreparation` parses: the grammar a run's write uses (ops/sinks/sql.py, the
#: statistics of ops/sinks/statistics.py): comparisons, ranges, AND/OR, CASE, aggregates,
#: quoted names, string literals, an alias.
_PARSER_WARM_UP = (
    "max_by(CASE WHEN (`p` = 'x' AND (`s` >= 0 AND `s` <= 9)) OR (`p` = 'y' AND (`s` >= 0 AND "
    "`s` <= 9)) THEN length(`b`) ELSE 1 END, `s`) AS `n`"
)
#: Preparations still running (at most one per JVM start): a JVM is not ended under them.
_PREPARING: set[_SqlPreparation] = set()


def local_spark_session(
    app_name: str,
    *,
    master: str = DEFAULT_SPARK_MASTER,
    warehouse_dir: str | os.PathLike[str] | None = None,
    ui: bool = False,
    shuffle_partitions: int | None = None,
    conf: Mapping[str, str] | None = None,
    register_source: bool = True,
) -> SparkSession:
    """Build (or return the running) local SparkSession with quiet logs and loopback networking.

    The driver's JVM is launched with :func:`driver_environment`: for a local master, unless the
    environment sets them, ``SPARK_LOCAL_IP=127.0.0.1`` (the driver would otherwise bind a public
    address) and ``PYSPARK_PYTHON`` = this interpreter (executors need the same venv for pyarrow
    and the azure SDK); for any master ``SPARK_CONF_DIR`` = the shipped quiet log4j2 config.
    This process's own environment is left alone. A non-local master (``spark://``, ``yarn``...)
    keeps the driver host and executor Python of the user's environment and Spark config: the
    project's code is shipped to its executors instead. The JVM starts with the first session of
    a process, so these only apply to it.

    Args:
        app_name: Spark application name (shown in logs).
        master: Spark master URL (default every local core).
        warehouse_dir: ``spark.sql.warehouse.dir`` for ``saveAsTable``; a temp dir in tests.
        ui: Start the Spark web UI (off in tests; it binds a port).
        shuffle_partitions: ``spark.sql.shuffle.partitions`` (default :data:`SESSION_CONF`'s).
        conf: Extra Spark configuration, applied last (overrides the defaults set here).
        register_source: Register the ``eventhubs`` data source on the session.

    Returns:
        The SparkSession.

    Example::

        spark = local_spark_session("ehingest-cli", warehouse_dir="/tmp/warehouse")
        df = spark.read.format("eventhubs").options(**opts).load()
    """
    local = is_local_master(master)
    settings = session_defaults(master)
    if ui:
        settings["spark.ui.enabled"] = "true"
    if shuffle_partitions is not None:
        settings["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    if local:
        # SPARK_LOCAL_IP when the environment sets it, loopback otherwise.
        for key in LOCAL_PINS:
            settings[key] = os.environ.get("SPARK_LOCAL_IP", LOOPBACK)
    if warehouse_dir is not None:
        warehouse = Path(warehouse_dir).resolve()
        settings["spark.sql.warehouse.dir"] = str(warehouse)
        # Keeps a Derby metastore (if Hive support is on) out of the working directory.
        settings["spark.driver.extraJavaOptions"] = " ".join(
            o
            for o in (
                settings.get("spark.driver.extraJavaOptions"),
                f"-Dderby.system.home={warehouse / '_derby'}",
            )
            if o
        )
    settings.update(conf or {})
    settings = {"spark.app.name": app_name, "spark.master": master, **settings}
    spark = start_classic_driver(settings)
    if register_source:
        from dagster_eventhub_ingest.resources.eventhubs_source import register_eventhubs_source

        register_eventhubs_source(spark)
    return spark


def join_preparations(timeout: float) -> None:
    """Wait up to ``timeout`` seconds for each SQL preparation still running in this process
    (its calls would fail loudly in a JVM being ended)."""
    for preparation in list(_PREPARING):
        preparation.join(timeout)
