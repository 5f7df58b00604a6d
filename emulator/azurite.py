"""Start and stop Azurite, the local Blob Storage stand-in, beside this package's Event Hubs one.

Used by the pytest fixtures (``tests/conftest.py``), the benchmarks (``bench/``) and the scripts:
Azurite binds 127.0.0.1 on a free port and is always stopped.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
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
            deadline = time.monotonic() + 30
            while proc.poll() is None and time.monotonic() < deadline:
                if _answers_as_azurite(bound):
                    yield azurite_connection_string(bound)
                    return
                time.sleep(0.1)
            stop_process(proc)
            with open(out, errors="replace") as f:
                said = f.read()[-2000:]
        if port is not None or "EADDRINUSE" not in said or attempt == 2:
            raise RuntimeError(
                f"Azurite did not start on 127.0.0.1:{bound} (exit code {proc.returncode}): "
                f"{said.strip() or 'no output'}"
            )


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
