"""Fixtures of the ``cluster`` tier: one standalone cluster and one Spark Connect server.

Started once for the whole tier (scripts/tiers/cluster.sh) and always stopped. The Connect
server boots in the background while the first standalone tests run.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from emulator.spark_cluster import ConnectServer, executor_venv, standalone_cluster


@dataclass
class Cluster:
    """The running cluster: its master URL, the Connect server on it, the executors' python."""

    master_url: str
    connect: ConnectServer
    executor_python: Path
    workdir: Path


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """A master + one 2-core worker whose Python lacks this project, and a Connect server."""
    python = executor_venv()
    workdir = Path(tempfile.mkdtemp(prefix="ehingest-cluster-"))
    with standalone_cluster(python, workdir) as master_url:
        server = ConnectServer(master_url, python, workdir)
        try:
            yield Cluster(master_url, server, python, workdir)
        finally:
            server.stop()
