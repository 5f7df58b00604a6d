"""A real Spark standalone cluster and a Spark Connect server, from the pip pyspark, on loopback.

The third local stand-in beside Azurite (:mod:`dagster_eventhub_ingest.emulator.azurite`) and the
Event Hubs emulator: used by the ``cluster`` test tier (tests/cluster/) and by
bench/cluster_throughput.py.

The executors' Python is a separate venv built from the lock WITHOUT this project (and without
pyspark, which Spark puts on its workers' path itself, nor Dagster, which no executor imports):
like the executors of any real cluster, it has the dependencies and never the repository, so the
project's code reaches it only by being shipped (resources/spark/code_shipping.py).

Every process started here binds 127.0.0.1 and is stopped (its process group) on exit.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from dagster_eventhub_ingest.emulator.azurite import ROOT, free_port, stop_process, wait_for_port
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
    out = open(log, "wb")  # noqa: SIM115 - closed by the caller's stack via the process
    return subprocess.Popen(
        args, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )


def _alive_workers(ui_port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as resp:
        return int(json.load(resp).get("aliveworkers", 0))


def _tail(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-3000:]
    except OSError:
        return ""


@contextlib.contextmanager
def standalone_cluster(
    executor_python: Path, workdir: Path, cores: int = 2, memory: str = "2g"
) -> Iterator[str]:
    """A master and one worker (``cores``) on 127.0.0.1; yields the master URL; always stopped."""
    home = spark_home()
    env = spark_env(executor_python)
    port, ui, worker_ui = free_port(), free_port(), free_port()
    master_url = f"spark://127.0.0.1:{port}"
    with contextlib.ExitStack() as stack:
        master = _spawn(
            [
                str(home / "bin" / "spark-class"),
                "org.apache.spark.deploy.master.Master",
                *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)),
            ],
            env,
            workdir / "master.log",
            workdir,
        )
        stack.callback(stop_process, master)
        try:
            wait_for_port(port, timeout=120, proc=master)
        except Exception as exc:
            raise RuntimeError(f"master did not start: {_tail(workdir / 'master.log')}") from exc
        (workdir / "work").mkdir(exist_ok=True)
        worker = _spawn(
            [
                str(home / "bin" / "spark-class"),
                "org.apache.spark.deploy.worker.Worker",
                *("--host", "127.0.0.1", "--cores", str(cores), "--memory", memory),
                *("--work-dir", str(workdir / "work"), "--webui-port", str(worker_ui)),
                master_url,
            ],
            env,
            workdir / "worker.log",
            workdir,
        )
        stack.callback(stop_process, worker)
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(OSError, ValueError):
                if _alive_workers(ui) >= 1:
                    break
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not register: {_tail(workdir / 'worker.log')}")
            time.sleep(0.5)
        yield master_url


class ConnectServer:
    """A Spark Connect server process on a cluster; :meth:`url` waits until it listens."""

    def __init__(
        self,
        master_url: str,
        executor_python: Path,
        workdir: Path,
        conf: dict[str, str] | None = None,
    ) -> None:
        home = spark_home()
        env = spark_env(executor_python)
        # spark-submit sizes this server like a daemon (SPARK_DAEMON_MEMORY), not by driver memory.
        env["SPARK_DAEMON_MEMORY"] = "768m"
        self.port = free_port()
        self.log = workdir / "connect.log"
        conf = {
            **APP_CONF,
            **(conf or {}),
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.sql.session.timeZone": "UTC",
        }
        args = [str(home / "bin" / "spark-submit"), "--master", master_url]
        args += ["--class", "org.apache.spark.sql.connect.service.SparkConnectServer"]
        args += ["--name", "ehingest-connect"]
        for key, value in conf.items():
            args += ["--conf", f"{key}={value}"]
        args.append("spark-internal")
        self.proc = _spawn(args, env, self.log, workdir)
        self._ready = False

    def url(self) -> str:
        """``sc://127.0.0.1:<port>`` once the server accepts connections."""
        if not self._ready:
            try:
                wait_for_port(self.port, timeout=240, proc=self.proc)
            except Exception as exc:
                raise RuntimeError(f"Connect server did not start: {_tail(self.log)}") from exc
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
