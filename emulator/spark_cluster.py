"""A real Spark standalone cluster and a Spark Connect server, from the pip pyspark, on loopback.

The third local stand-in beside Azurite (:mod:`dagster_eventhub_ingest.emulator.azurite`) and the
Event Hubs emulator: used by the ``cluster`` test tier (tests/cluster/) and by
bench/cluster_throughput.py.

The executors' Python is a separate venv built from the lock WITHOUT this project (and without
pyspark, which Spark puts on its workers' path itself, nor Dagster, which no executor imports):
like the executors of any real cluster, it has the dependencies and never the repository, so the
project's code reaches it only by being shipped (resources/spark/code_shipping.py).

Every process started here binds 127.0.0.1 and is stopped (its process group) on exit. A service
is ready when it answers as itself, not when its port is open: a port chosen free can be taken by
another process (tiers run side by side) before the service binds it. The services are made to
fail on a taken port rather than move to the next one (which would leave us waiting on the other
process's), and are then started again on other ports.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dagster_eventhub_ingest.emulator.azurite import (
    ROOT,
    free_port,
    log_tail,
    stop_process,
    wait_answering,
)
from dagster_eventhub_ingest.resources.spark.session import SPARK_CONF_DIR

#: Every application on the 2-core worker takes one core, so the Spark Connect server (a
#: long-running application) and a classic driver run side by side.
APP_CONF = {
    "spark.cores.max": "1",
    "spark.executor.cores": "1",
    "spark.executor.memory": "512m",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # Executors read with the native step (resources/eventhubs_source/fastpath/), built from
    # the zip the driver ships into their host's cache: required, so that a read that silently fell
    # back to pure Python fails the cluster and Connect tests instead.
    "spark.executorEnv.EHINGEST_NATIVE": "1",
}
# Test runs (scripts/test.sh) start short-lived JVMs with cheaper JIT and GC settings.
if os.environ.get("EHINGEST_TEST_JAVA_OPTS"):
    APP_CONF["spark.executor.extraJavaOptions"] = os.environ["EHINGEST_TEST_JAVA_OPTS"]
# Executors need this; Spark ships pyspark/py4j to its Python workers itself.
_PRUNED = ("pyspark",)
#: The extras whose libraries executors use (the runtime ones; never Dagster or Airflow).
_EXTRAS = ("deltalake", "connect")


def spark_home() -> Path:
    """The pip pyspark's folder, which is a Spark distribution (bin/, sbin/, jars/)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def executor_venv(cache: Path | None = None) -> Path:
    """The executors' python: the lock's dependencies without the project, built once per lock.

    ``uv export --no-emit-project`` (the runtime extras, no Dagster) then ``uv venv`` +
    ``uv pip install`` (seconds with uv's cache warm). Returns the venv's python.
    """
    lock = (ROOT / "uv.lock").read_bytes()
    key = hashlib.sha256(lock + sys.version.encode()).hexdigest()[:12]
    base = cache or Path(os.environ.get("EHINGEST_CLUSTER_CACHE", tempfile.gettempdir()))
    venv = base / f"ehingest-executor-venv-{key}"
    python = venv / "bin" / "python"
    if python.exists() and (venv / ".complete").exists():
        return python
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    req = venv.parent / f"{venv.name}.txt"
    prune = [arg for name in _PRUNED for arg in ("--prune", name)]
    extras = [arg for name in _EXTRAS for arg in ("--extra", name)]
    uv = shutil.which("uv") or "uv"
    subprocess.run(
        [
            uv,
            "export",
            "--frozen",
            "--no-emit-project",
            "--no-dev",
            "--no-hashes",
            "-q",
            *extras,
            *prune,
            "-o",
            str(req),
        ],
        cwd=ROOT,
        check=True,
    )
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    subprocess.run(
        [uv, "pip", "install", "-q", "--python", str(python), "-r", str(req)], check=True
    )
    check = subprocess.run(
        [str(python), "-c", "import resources"], capture_output=True, text=True, cwd=venv
    )
    assert "No module named 'resources'" in check.stderr, "the executor venv has the project"
    (venv / ".complete").write_text("ok")
    return python


def spark_env(executor_python: Path) -> dict[str, str]:
    """Environment of Spark daemons and drivers: loopback, quiet logs, the executors' python."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_DRIVER_PYTHON", "SPARK_REMOTE")
    }
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_CONF_DIR=str(SPARK_CONF_DIR),
        SPARK_DAEMON_MEMORY="256m",
        PYSPARK_PYTHON=str(executor_python),
        # Executors resolve "python3" on PATH when a driver names no interpreter.
        PATH=f"{executor_python.parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    return env


def _spawn(args: list[str], env: dict[str, str], log: Path, cwd: Path) -> subprocess.Popen:
    # The child holds its own copy of the log's descriptor; ours closes once it is spawned.
    with open(log, "wb") as out:
        return subprocess.Popen(
            args, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


#: How many times a service is started on fresh ports when one it was given was taken.
_ATTEMPTS = 3
#: What a Spark service logs when it cannot bind a port it was given: the master fails so with
#: ``spark.port.maxRetries=0`` (it would otherwise move to the next port), the Connect server
#: does so by default (``spark.connect.grpc.port.maxRetries`` is 0).
_PORT_TAKEN = "java.net.BindException"


def _master_state(ui_port: int) -> dict[str, Any]:
    """The master's state from its web UI's ``/json/`` ({} when nothing answers as a master)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as resp:
            state = json.load(resp)
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _master_is_up(ui_port: int, master_url: str) -> bool:
    """Whether the master we started serves its UI there: alive, at the URL we hand out."""
    state = _master_state(ui_port)
    return state.get("status") == "ALIVE" and state.get("url") == master_url


def _answers_as_spark_connect(port: int) -> bool:
    """Whether a Spark Connect server answers on the port: it tells its Spark version.

    One call of Spark Connect's own gRPC service in a session of its own, released after.
    """
    import grpc
    from pyspark.sql.connect import proto
    from pyspark.sql.connect.proto.base_pb2_grpc import SparkConnectServiceStub

    session, user = str(uuid.uuid4()), proto.UserContext(user_id="ehingest-readiness")
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = SparkConnectServiceStub(channel)
        version = proto.AnalyzePlanRequest.SparkVersion()
        request = proto.AnalyzePlanRequest(
            session_id=session, user_context=user, spark_version=version
        )
        try:
            answer = stub.AnalyzePlan(request, timeout=10)
        except grpc.RpcError:
            return False
        release = proto.ReleaseSessionRequest(session_id=session, user_context=user)
        with contextlib.suppress(grpc.RpcError):
            stub.ReleaseSession(release, timeout=10)
    return bool(answer.spark_version.version)


@contextlib.contextmanager
def standalone_cluster(
    executor_python: Path, workdir: Path, cores: int = 2, memory: str = "2g"
) -> Iterator[str]:
    """A master and one worker (``cores``) on 127.0.0.1; yields the master URL; always stopped.

    Ready when the master's UI says it is alive at the URL yielded and the worker registered with
    it. The master fails on a taken port (``spark.port.maxRetries=0``, for its process alone) and
    is started again on others; the worker binds ports the system assigns.
    """
    home = spark_home()
    env = spark_env(executor_python)
    master_env = {
        **env,
        "SPARK_MASTER_OPTS": f"{env.get('SPARK_MASTER_OPTS', '')} -Dspark.port.maxRetries=0",
    }
    master_log = workdir / "master.log"
    with contextlib.ExitStack() as stack:
        for _ in range(_ATTEMPTS):
            port, ui = free_port(), free_port()
            master_url = f"spark://127.0.0.1:{port}"
            master = _spawn(
                [
                    str(home / "bin" / "spark-class"),
                    "org.apache.spark.deploy.master.Master",
                    *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)),
                ],
                master_env,
                master_log,
                workdir,
            )
            stack.callback(stop_process, master)
            up = functools.partial(_master_is_up, ui, master_url)
            if wait_answering(master, up, "the master", master_log, 120, _PORT_TAKEN):
                break
        else:
            raise RuntimeError(
                f"the master's ports were taken {_ATTEMPTS} times: {log_tail(master_log)}"
            )
        (workdir / "work").mkdir(exist_ok=True)
        worker_log = workdir / "worker.log"
        worker = _spawn(
            [
                str(home / "bin" / "spark-class"),
                "org.apache.spark.deploy.worker.Worker",
                *("--host", "127.0.0.1", "--cores", str(cores), "--memory", memory),
                *("--work-dir", str(workdir / "work"), "--webui-port", "0"),
                master_url,
            ],
            env,
            worker_log,
            workdir,
        )
        stack.callback(stop_process, worker)

        def registered() -> bool:
            return int(_master_state(ui).get("aliveworkers", 0)) >= 1

        if not wait_answering(worker, registered, "the worker", worker_log, 120, _PORT_TAKEN):
            raise RuntimeError(f"the worker could not bind a port: {log_tail(worker_log)}")
        yield master_url


class ConnectServer:
    """A Spark Connect server process on a cluster; :meth:`url` waits until it answers.

    Started at once, so that it boots while the caller does something else. When its port was
    taken before it bound it, :meth:`url` starts it again on another.
    """

    def __init__(
        self,
        master_url: str,
        executor_python: Path,
        workdir: Path,
        conf: dict[str, str] | None = None,
    ) -> None:
        self._master_url = master_url
        self._env = spark_env(executor_python)
        # spark-submit sizes this server like a daemon (SPARK_DAEMON_MEMORY), not by driver memory.
        self._env["SPARK_DAEMON_MEMORY"] = "768m"
        self._conf = {**APP_CONF, **(conf or {})}
        self._workdir = workdir
        self.log = workdir / "connect.log"
        self._ready = False
        self._start()

    def _start(self) -> None:
        self.port = free_port()
        conf = {
            **self._conf,
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.sql.session.timeZone": "UTC",
        }
        args = [str(spark_home() / "bin" / "spark-submit"), "--master", self._master_url]
        args += ["--class", "org.apache.spark.sql.connect.service.SparkConnectServer"]
        args += ["--name", "ehingest-connect"]
        for key, value in conf.items():
            args += ["--conf", f"{key}={value}"]
        args.append("spark-internal")
        self.proc = _spawn(args, self._env, self.log, self._workdir)

    def url(self) -> str:
        """``sc://127.0.0.1:<port>`` once the server answers as Spark Connect there."""
        if not self._ready:
            for attempt in range(_ATTEMPTS):
                if attempt:
                    self._start()
                answers = functools.partial(_answers_as_spark_connect, self.port)
                if wait_answering(
                    self.proc, answers, "the Connect server", self.log, 240, _PORT_TAKEN
                ):
                    break
            else:
                raise RuntimeError(
                    f"the Connect server's port was taken {_ATTEMPTS} times: {log_tail(self.log)}"
                )
            self._ready = True
        return f"sc://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Stop the server and its executors."""
        stop_process(self.proc, grace=15)


@contextlib.contextmanager
def connect_server(
    master_url: str, executor_python: Path, workdir: Path, conf: dict[str, str] | None = None
) -> Iterator[str]:
    """A Spark Connect server running on ``master_url``; yields ``sc://127.0.0.1:<port>``.

    ``conf`` overrides :data:`APP_CONF` (e.g. ``spark.cores.max`` to give it the whole worker).
    """
    server = ConnectServer(master_url, executor_python, workdir, conf)
    try:
        yield server.url()
    finally:
        server.stop()
