"""What goes wrong on an AMQP connection: the peer's error conditions and the transport's failures.

The receiver raises these; the reader (``resources/eventhubs_source/receiver.py``) turns them into
the project's own errors (``resources/errors.py``), after reconnecting where that can help.
Which conditions are worth a reconnect is the Azure SDK's own list (its pyamqp
``RetryPolicy.no_retry``): a missing entity, a refused token or a stolen link stays so however
often one asks.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "NOT_RETRYABLE",
    "AmqpError",
    "AuthorizationError",
    "ConnectionLostError",
    "LinkDetachedError",
]

#: Conditions a new connection or link does not cure (the SDK's ``RetryPolicy.no_retry``).
NOT_RETRYABLE = frozenset(
    {
        "amqp:decode-error",
        "amqp:link:message-size-exceeded",
        "amqp:not-found",
        "amqp:not-implemented",
        "amqp:link:redirect",
        "amqp:not-allowed",
        "amqp:unauthorized-access",
        "amqp:link:stolen",
        "amqp:resource-limit-exceeded",
        "amqp:connection:redirect",
        "amqp:precondition-failed",
        "amqp:invalid-field",
        "amqp:resource-deleted",
        "amqp:illegal-state",
        "amqp:frame-size-too-small",
        "amqp:connection:framing-error",
        "amqp:session:unattached-handle",
        "amqp:session:handle-in-use",
        "amqp:session:errant-link",
        "amqp:session:window-violation",
        "com.microsoft:argument-out-of-range",
    }
)


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


class AmqpError(Exception):
    """An AMQP error condition and its description, from the peer or about the transport."""

    def __init__(
        self, condition: Any, description: Any = None, *, retryable: bool | None = None
    ) -> None:
        self.condition = _text(condition) or "amqp:internal-error"
        self.description = _text(description)
        self._retryable = retryable
        text = f"{self.condition}: {self.description}" if self.description else self.condition
        super().__init__(text)

    @property
    def retryable(self) -> bool:
        """Whether a new connection (or link) may succeed where this one failed: as said when
        raised, else by the condition."""
        if self._retryable is not None:
            return self._retryable
        return self.condition not in NOT_RETRYABLE

    @classmethod
    def from_error(cls, error: Any, default: str) -> AmqpError:
        """The error of a detach, end or close (an AMQP ``error``: described list of condition,
        description, info), or ``default`` when the peer gave none."""
        fields = getattr(error, "value", None)
        if isinstance(fields, list) and fields:
            return cls(fields[0], fields[1] if len(fields) > 1 else None)
        return cls(default, "the peer gave no error")


class LinkDetachedError(AmqpError):
    """The service detached (or refused) the receiver's link, e.g. ``amqp:link:stolen``."""


class ConnectionLostError(AmqpError):
    """The connection or its session ended: the peer closed it, or the socket failed (a new
    connection may do better, unless said otherwise: a certificate that is not trusted)."""

    def __init__(
        self, condition: Any, description: Any = None, *, retryable: bool | None = True
    ) -> None:
        super().__init__(condition, description, retryable=retryable)


class AuthorizationError(AmqpError):
    """A CBS ``put-token`` was refused; ``status`` is the service's status code."""

    def __init__(self, status: int, description: Any) -> None:
        # 401/403: the credential; 404: the hub (or namespace) does not exist.
        condition = "amqp:not-found" if status == 404 else "amqp:unauthorized-access"
        super().__init__(condition, f"put-token status {status}: {_text(description)}")
        self.status = status

    @property
    def retryable(self) -> bool:
        return self.status >= 500 or self.status in (408, 429)
