"""How every Blob Storage call of the partition store is retried: transient answers, bounded.

The storage SDK's policies (``ExponentialRetry``, ``LinearRetry``) retry 408, 5xx and dropped
connections, but never 429, and they ignore ``Retry-After``; Azure Storage answers a busy
account with exactly those (503 ``ServerBusy``, 429). :class:`StoreRetryPolicy` (sync) and
:class:`AsyncStoreRetryPolicy` (``azure.storage.blob.aio``) are the SDK's ``ExponentialRetry``
(its counters, body rewinding and location handling) with its retry loop extended:

* **Transient answers**: 408, 429, 500, 502, 503 and 504, and connections that failed or broke;
  nothing else (a 412 of a lost compare-and-set stays a lost race, whatever its headers).
* **Retry-After honoured**: ``Retry-After`` (seconds or an HTTP date), ``retry-after-ms`` or
  ``x-ms-retry-after-ms`` sets the wait; without one: at once, then 0.5, 1, 2, 4, 8, 8 ...
  seconds, each +-20 % so that runs throttled together do not retry together.
* **A budget per call.** No wait that would end past the call's deadline is started: the call
  fails at once, naming the wait it refused. The deadline is :data:`CALL_BUDGET_SECONDS` after
  the call starts, or earlier when the caller passes one (``ehi_deadline``, a
  ``time.monotonic()`` value): the partition store passes what is left of the lease for a write
  on a held lease, so a retried renewal never outlives the lease it renews.
* **What happened is counted**: the caller passes a :class:`RetryLog` (``ehi_retries``), which
  records the retries made, the time waited and the last transient answer, so that errors say
  how many retries really happened (:func:`call_options` builds both options).

A retried conditional write may have been applied by the attempt whose answer was lost (a read
timeout, a 500 ``OperationTimedOut``); its retry then fails its condition. The store tells that
apart by reading the blob back (``PartitionStore._confirm``, asking the backend whether the
failed condition came on a retry: ``RetryLog.retries``). Compare-and-set stays exact.

Connection failures (nothing listens) stop after :data:`CONNECT_RETRIES` retries (about 1.5 s),
so an unreachable endpoint fails fast; transient answers get up to :data:`STATUS_RETRIES`
within the budget.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, cast

from azure.core.exceptions import AzureError, ClientAuthenticationError
from azure.storage.blob import ExponentialRetry
from azure.storage.blob.aio import ExponentialRetry as AsyncExponentialRetry

__all__ = [
    "CALL_BUDGET_SECONDS",
    "CONNECT_RETRIES",
    "RETRY_STATUSES",
    "STATUS_RETRIES",
    "AsyncStoreRetryPolicy",
    "RetryLog",
    "StoreRetryPolicy",
]

#: Answers that mean "the service could not do it now": timeout, throttling, server trouble.
RETRY_STATUSES: frozenset[int] = frozenset({408, 429, 500, 502, 503, 504})
#: Retries of transient answers per call (the budget usually ends them first).
STATUS_RETRIES = 12
#: Retries when the connection could not be made, or broke before the answer.
CONNECT_RETRIES = 3
#: The second retry's wait without a Retry-After; each later one doubles it.
BACKOFF_SECONDS = 0.5
#: Longest wait without a Retry-After (one may ask for more, within the budget).
MAX_BACKOFF_SECONDS = 8.0
#: How long one call may keep retrying when its caller gives no deadline of its own.
CALL_BUDGET_SECONDS = 30.0
_JITTER = 0.2

_LOG = "ehi_retries"
_DEADLINE = "ehi_deadline"
_NEXT = "ehi_next_delay"


@dataclass
class RetryLog:
    """What the retry policy did for one call (pass it as ``ehi_retries=``)."""

    #: Retries made (attempts - 1).
    retries: int = 0
    #: Seconds slept between attempts.
    waited: float = 0.0
    #: The last transient answer or error, e.g. ``"HTTP 503"`` or ``"ServiceRequestError"``.
    last: str | None = None
    #: The wait that was not started because it would have passed the call's deadline.
    refused_wait: float | None = None
    #: The call's budget in seconds when it started (for messages).
    budget: float | None = None

    def describe(self) -> str:
        """``after 2 retries over 1.6 s`` / ``without a retry``, plus why retrying stopped."""
        if self.retries == 0:
            text = "without a retry"
        else:
            plural = "retry" if self.retries == 1 else "retries"
            text = f"after {self.retries} {plural} over {self.waited:.1f} s"
        if self.refused_wait is not None and self.budget is not None:
            text += (
                f" (the next wait, {self.refused_wait:.1f} s, would pass this call's "
                f"{self.budget:.0f} s budget)"
            )
        return text


def retry_after_seconds(headers: Any) -> float | None:
    """The wait an answer asks for: ``Retry-After`` (seconds or an HTTP date),
    ``retry-after-ms`` or ``x-ms-retry-after-ms``; None when it asks for none."""
    value = headers.get("Retry-After")
    if value:
        try:
            return max(0.0, float(value))
        except ValueError:
            try:
                when = parsedate_to_datetime(value)
            except (TypeError, ValueError):
                return None
            return max(0.0, when.timestamp() - time.time())
    for name in ("retry-after-ms", "x-ms-retry-after-ms"):
        value = headers.get(name)
        if value:
            try:
                return max(0.0, float(value) / 1000)
            except ValueError:
                return None
    return None


class _Budgeted:
    """What both policies change in the SDK's ``ExponentialRetry`` (they differ in awaiting)."""

    call_budget: float

    def __init__(self, *, call_budget: float = CALL_BUDGET_SECONDS, **kwargs: Any) -> None:
        kwargs.setdefault("retry_total", STATUS_RETRIES)
        kwargs.setdefault("retry_status", STATUS_RETRIES)
        kwargs.setdefault("retry_connect", CONNECT_RETRIES)
        kwargs.setdefault("retry_read", CONNECT_RETRIES)
        kwargs.setdefault("random_jitter_range", 0)
        cast(Any, super()).__init__(**kwargs)
        self.call_budget = call_budget

    def configure_retries(self, request: Any) -> dict[str, Any]:
        settings: dict[str, Any] = cast(Any, super()).configure_retries(request)
        options = request.context.options
        now = time.monotonic()
        deadline = options.pop(_DEADLINE, None)
        default = now + self.call_budget
        settings[_DEADLINE] = default if deadline is None else min(deadline, default)
        log = options.pop(_LOG, None)
        settings[_LOG] = log if isinstance(log, RetryLog) else RetryLog()
        settings[_LOG].budget = max(0.0, settings[_DEADLINE] - now)
        return settings

    def get_backoff_time(self, settings: dict[str, Any]) -> float:
        # ``count`` is the number of the retry about to be made (1 for the first).
        count = settings["count"]
        if count <= 1:
            return 0.0
        backoff = min(BACKOFF_SECONDS * 2 ** (count - 2), MAX_BACKOFF_SECONDS)
        return backoff * random.uniform(1 - _JITTER, 1 + _JITTER)

    def _retry_answer(self, settings: dict[str, Any], request: Any, response: Any) -> bool:
        """Whether to retry after a transient answer (counters, then the budget)."""
        log: RetryLog = settings[_LOG]
        log.last = f"HTTP {response.http_response.status_code}"
        if not cast(Any, self).increment(
            settings, request=request.http_request, response=response.http_response
        ):
            return False
        return self._plan(settings, retry_after_seconds(response.http_response.headers))

    def _retry_error(self, settings: dict[str, Any], request: Any, error: AzureError) -> bool:
        """Whether to retry after a connection that failed or broke."""
        if isinstance(error, ClientAuthenticationError):  # the SDK's signing errors among them
            return False
        settings[_LOG].last = type(error).__name__
        if not cast(Any, self).increment(settings, request=request.http_request, error=error):
            return False
        return self._plan(settings, None)

    def _plan(self, settings: dict[str, Any], retry_after: float | None) -> bool:
        log: RetryLog = settings[_LOG]
        delay = retry_after if retry_after else self.get_backoff_time(settings)
        if time.monotonic() + delay > settings[_DEADLINE]:
            log.refused_wait = delay
            return False
        settings[_NEXT] = delay
        log.retries += 1
        log.waited += delay
        return True

    @staticmethod
    def _transient(response: Any) -> bool:
        return response.http_response.status_code in RETRY_STATUSES

    @staticmethod
    def _finish(settings: dict[str, Any], response: Any) -> Any:
        # What the SDK's own loop leaves on the response (its list pages read location_mode).
        if settings["history"]:
            response.context["history"] = settings["history"]
        response.http_response.location_mode = settings["mode"]
        return response


class StoreRetryPolicy(_Budgeted, ExponentialRetry):
    """The storage SDK's ``ExponentialRetry`` with 429, Retry-After, a per-call budget and a
    :class:`RetryLog` (see the module's docstring).

    Args:
        call_budget: seconds a call may keep retrying unless it passes an earlier deadline.
        **kwargs: the SDK policy's options (``retry_total``, ``retry_connect``...).
    """

    def send(self, request: Any) -> Any:
        settings = self.configure_retries(request)
        while True:
            try:
                response = self.next.send(request)
            except AzureError as err:
                if not self._retry_error(settings, request, err):
                    raise
            else:
                if not (
                    self._transient(response) and self._retry_answer(settings, request, response)
                ):
                    return self._finish(settings, response)
            delay = settings.pop(_NEXT, 0.0)
            if delay > 0:
                request.context.transport.sleep(delay)


class AsyncStoreRetryPolicy(_Budgeted, AsyncExponentialRetry):
    """:class:`StoreRetryPolicy` for ``azure.storage.blob.aio`` clients (Airflow's triggerer)."""

    async def send(self, request: Any) -> Any:  # type: ignore[override]  # the SDK's typing
        settings = self.configure_retries(request)
        while True:
            try:
                response = await cast(Any, self.next).send(request)
            except AzureError as err:
                if not self._retry_error(settings, request, err):
                    raise
            else:
                if not (
                    self._transient(response) and self._retry_answer(settings, request, response)
                ):
                    return self._finish(settings, response)
            delay = settings.pop(_NEXT, 0.0)
            if delay > 0:
                await request.context.transport.sleep(delay)


def call_options(log: RetryLog, deadline: float | None = None) -> dict[str, Any]:
    """The per-call keyword arguments that give a storage call its log (and deadline)."""
    options: dict[str, Any] = {_LOG: log}
    if deadline is not None:
        options[_DEADLINE] = deadline
    return options
