"""Start and stop Azurite, the local Blob Storage stand-in, beside this package's Event Hubs one.

Used by the pytest fixtures (``tests/conftest.py``), the benchmarks (``bench/``) and the scripts:
Azurite binds 127.0.0.1 on a free port and is always stopped.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

#: The repository (where ``npm ci`` put the pinned Azurite).
ROOT = Path(__file__).resolve().parent.parent

# Azurite's documented well-known development account (public, not a secret).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log_tail(log: Path | str) -> str:
    """The end of a service's log ("" when it cannot be read)."""
    try:
        return Path(log).read_text(errors="replace")[-3000:]
    except OSError:
        return ""


def wait_answering(
    proc: subprocess.Popen,
    ready: Callable[[], bool],
    what: str,
    log: Path | str,
    timeout: float,
    port_taken: str,
) -> bool:
    """Wait until the service answers as itself (``ready()``): True. False when it exited
    because a port it was given was taken (``port_taken`` in its log): the caller starts it
    again on another. An open port is not enough: a port chosen free can be bound by another
    process before the service binds it.

    Raises when it exited for another reason, or did not answer within ``timeout`` seconds
    (then it is stopped); both quote its log.
    """
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            said = log_tail(log)
            if port_taken in said:
                return False
            raise RuntimeError(
                f"{what} stopped (exit code {proc.returncode}): {said.strip() or 'no output'}"
            )
        if time.monotonic() > deadline:
            stop_process(proc)
            raise TimeoutError(f"{what} did not answer in {timeout:.0f} s: {log_tail(log)}")
        time.sleep(0.1)
    return True


def azurite_binary() -> str:
    """Path of ``azurite-blob`` from the project's pinned npm install (``npm ci``)."""
    local = ROOT / "node_modules" / ".bin" / "azurite-blob"
    if local.exists():
        return str(local)
    found = shutil.which("azurite-blob")
    if found:
        return found
    raise RuntimeError(
        "azurite-blob not found: run `npm ci` in the project folder (it installs the pinned "
        "Azurite from package-lock.json)"
    )


def azurite_connection_string(port: int) -> str:
    """Connection string for the Azurite blob service on 127.0.0.1:port."""
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint=http://127.0.0.1:{port}/{AZURITE_ACCOUNT};"
    )


def _answers_as_azurite(port: int) -> bool:
    """Whether Azurite itself answers on the port: another process may have taken a free port
    between :func:`free_port` choosing it and Azurite binding it."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
            server = response.headers.get("Server", "")
    except urllib.error.HTTPError as error:  # its answer to a bare GET is 400
        server = error.headers.get("Server", "")
    except (OSError, ValueError):
        return False
    return server.startswith("Azurite")


@contextlib.contextmanager
def azurite(port: int | None = None, location: str | None = None) -> Iterator[str]:
    """Run Azurite's blob service on 127.0.0.1; yields its connection string; always stops it.

    Without ``port``, on a free one; if another process takes it first, Azurite is started
    again on another (up to three times).
    """
    for attempt in range(3):
        bound = port or free_port()
        with contextlib.ExitStack() as stack:
            where = location
            if where is None:
                where = stack.enter_context(tempfile.TemporaryDirectory(prefix="azurite-"))
            out = os.path.join(where, "azurite.out")
            log = open(out, "wb")  # noqa: SIM115
            stack.callback(log.close)
            proc = subprocess.Popen(
                [
                    azurite_binary(),
                    "--blobHost",
                    "127.0.0.1",
                    "--blobPort",
                    str(bound),
                    "--location",
                    where,
                    "--skipApiVersionCheck",
                    "--disableTelemetry",
                    "--silent",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            stack.callback(stop_process, proc)
            what = f"Azurite on 127.0.0.1:{bound}"
            up = functools.partial(_answers_as_azurite, bound)
            if wait_answering(proc, up, what, out, 30, port_taken="EADDRINUSE"):
                yield azurite_connection_string(bound)
                return
            said = log_tail(out).strip()  # before its temp dir goes
        if port is not None or attempt == 2:
            raise RuntimeError(f"{what}: its port was taken: {said}")


def stop_process(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """Stop a service started in its own session: SIGTERM to its group, SIGKILL after ``grace``."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait()
