"""Real exceptions for tests: raised, with the chain Python gives them; and a simulated process
death."""

from __future__ import annotations

from collections.abc import Callable


def raised(make: Callable[[], object]) -> BaseException:
    """What ``make()`` raises (it must raise)."""
    try:
        make()
    except BaseException as exc:
        return exc
    raise AssertionError("expected a failure")


def raised_from(outer: BaseException, cause: BaseException) -> BaseException:
    """``outer`` raised ``from cause`` while handling it: ``__cause__`` and ``__context__`` set."""
    try:
        try:
            raise cause
        except BaseException as inner:
            raise outer from inner
    except BaseException as exc:
        return exc


class Crash(BaseException):
    """A simulated process death: a BaseException, so no ``except Exception`` swallows it."""


def crash(*_: object) -> None:
    """Die here (e.g. as a sink's ``after_write``: written, not checkpointed)."""
    raise Crash()
