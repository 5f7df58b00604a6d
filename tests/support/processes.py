"""Process trees for the cancellation tests: what a run started, and whether any of it is left.

A process that exited but was not yet reaped by its parent (a zombie) counts as gone.
"""

from __future__ import annotations

from typing import Any

import psutil

__all__ = ["STOPPED_PROMPTLY_SECONDS", "descendants", "spark_processes", "still_running"]

#: How soon after SIGTERM a stopped run must have exited in a test. On an idle machine a run
#: exits within 15 s (docs/run.md, "Stopping a run", has the figures and the commands); CI shares
#: 2 cores between the main run and every tier, which stretched a 10 s stop to 18 s. What the
#: bound tells apart is a stop on request from one that waits on something else: a lease expiry
#: (minutes), or a host's kill after its grace.
STOPPED_PROMPTLY_SECONDS = 45


def descendants(pid: int) -> list[psutil.Process]:
    """Every process below ``pid``."""
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return []


def spark_processes(pid: int) -> list[psutil.Process]:
    """The local Spark driver JVMs below ``pid``, with everything below them (Python workers)."""
    out: list[psutil.Process] = []
    for proc in descendants(pid):
        try:
            if proc.name() == "java":
                out += [proc, *proc.children(recursive=True)]
        except psutil.Error:
            continue
    return out


def still_running(procs: list[Any]) -> list[str]:
    """``name(pid)`` of the processes of ``procs`` that still run."""
    alive = []
    for proc in procs:
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{proc.name()}({proc.pid})")
        except psutil.Error:
            continue
    return alive
