"""Process trees for the cancellation tests: what a run started, and whether any of it is left.

A process that exited but was not yet reaped by its parent (a zombie) counts as gone.
"""

from __future__ import annotations

from typing import Any

import psutil

__all__ = ["descendants", "spark_processes", "still_running"]


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
