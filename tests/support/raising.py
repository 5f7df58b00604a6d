"""Real exceptions for tests that classify them: raised, with the chain Python gives them."""

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
