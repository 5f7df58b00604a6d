"""The SDK's AMQP handshake at the network's pace instead of 50 ms a frame.

azure-eventhub opens every management call (hub and partition properties) and every receiver with
``while not client.client_ready(): time.sleep(0.05)``. ``client_ready()`` itself waits on the
socket for the next handshake frame (SASL, open, begin, the CBS token put, attach...) and returns
False until the last one arrived, so each of the ~8 frames costs a fixed 50 ms sleep on top of the
round trip: 0.41 s per management call or receiver on loopback, where the frames take ~2 ms.
A run makes several of them before it reads (the hub's properties, a snapshot, a final look for
the report) and every Spark task opens a receiver.

:func:`prompt_transport` is the SDK's own pyamqp transport whose management and receive clients
answer ``client_ready()`` only when they are ready, or after :data:`READY_WAIT_SECONDS`: the
SDK's loop then never sleeps between frames. Nothing else changes: the same frames, the same
errors (``client_ready()`` raises exactly as before), the same timeouts (a handshake that takes
longer than the wait falls back to the SDK's loop). The SDK takes it through the
``amqp_transport`` keyword its clients accept (:meth:`EventHubSettings.consumer_client`); an SDK
without that transport class keeps its own (:func:`prompt_transport` returns None).
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["READY_WAIT_SECONDS", "prompt_ready", "prompt_transport"]

#: How long one ``client_ready()`` call keeps waiting for the handshake before answering False
#: (the SDK then sleeps its 50 ms and asks again). Each frame read inside waits at most the
#: client's socket timeout (0.2 s by default), so a stalled handshake still reaches the SDK's
#: auth timeout and errors as before.
READY_WAIT_SECONDS = 2.0

# A client_ready() that returned without waiting on the socket (a state that answers at once)
# is asked again after this pause, never in a busy loop.
_MIN_STEP_SECONDS = 0.0005
_PAUSE_SECONDS = 0.001


def prompt_ready(client_ready: Any, wait: float = READY_WAIT_SECONDS) -> bool:
    """Call ``client_ready`` until it answers True or ``wait`` seconds passed; its last answer.

    ``client_ready`` reads at most one frame per call, waiting on the socket for it, so this
    loops at the pace frames arrive. Exceptions propagate unchanged.
    """
    deadline = time.monotonic() + wait
    while True:
        started = time.monotonic()
        if client_ready():
            return True
        now = time.monotonic()
        if now >= deadline:
            return False
        if now - started < _MIN_STEP_SECONDS:
            time.sleep(_PAUSE_SECONDS)


def _prompt(client: Any) -> Any:
    """``client`` with a :func:`prompt_ready` ``client_ready`` (an instance attribute, so the
    SDK's own calls, ``do_work`` included, get it too)."""
    client.client_ready = functools.partial(prompt_ready, client.client_ready)
    return client


@functools.cache
def prompt_transport() -> type | None:
    """The SDK's ``PyamqpTransport`` with prompt management and receive clients, or None when
    this azure-eventhub does not have it (the SDK's default transport is used then)."""
    try:
        from azure.eventhub._transport._pyamqp_transport import PyamqpTransport
    except ImportError:
        logger.debug("azure-eventhub has no PyamqpTransport: the SDK's handshake polls stay")
        return None
    if not all(
        callable(getattr(PyamqpTransport, name, None))
        for name in ("create_mgmt_client", "create_receive_client")
    ):
        return None

    class PromptPyamqpTransport(PyamqpTransport):
        """:class:`PyamqpTransport` whose clients are ready without the 50 ms polls."""

        @staticmethod
        def create_mgmt_client(*args: Any, **kwargs: Any) -> Any:
            return _prompt(PyamqpTransport.create_mgmt_client(*args, **kwargs))

        @staticmethod
        def create_receive_client(*args: Any, **kwargs: Any) -> Any:
            return _prompt(PyamqpTransport.create_receive_client(*args, **kwargs))

    return PromptPyamqpTransport
