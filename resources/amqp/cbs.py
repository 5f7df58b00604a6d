"""Authorization over ``$cbs``: a token for the consumer group's audience, renewed before it lapses.

Event Hubs authorizes a connection's links by tokens put on its ``$cbs`` node (claims-based
security): a request link and a reply link on the session, a ``put-token`` request whose
application properties name the audience (``sb://<namespace>/<hub>/consumergroups/<group>``,
what the SDK's consumers put), the token's type and its expiry, and the token as the body; the
answer's ``status-code`` says whether it was taken. Tokens come from the reader's settings:

* a connection string's shared access key signs a SAS token for the audience (HMAC-SHA256 over
  the URL-encoded audience and the expiry, an hour ahead, as the SDK signs it);
* a connection string's ``SharedAccessSignature`` is put as it is, until its ``se``;
* an Entra ID credential (``azure-identity``: any object with ``get_token(scope)``) gives a JWT
  for ``https://eventhubs.azure.net//.default``, the SDK's scope.

A token is put again when 90 % of its lifetime has passed (the SDK's 10 % refresh window):
:meth:`Cbs.renew_if_due` is cheap enough for the receive loop to ask every turn.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote_plus, urlencode

from dagster_eventhub_ingest.resources.amqp import framing
from dagster_eventhub_ingest.resources.amqp.codec import Timestamp, decode
from dagster_eventhub_ingest.resources.amqp.connection import Connection, Link
from dagster_eventhub_ingest.resources.amqp.errors import AmqpError, AuthorizationError

if TYPE_CHECKING:
    from dagster_eventhub_ingest.resources.settings import EventHubSettings

__all__ = ["Cbs", "Token", "TokenSource", "audience_of", "sas_token", "token_source"]

SAS_TOKEN_TYPE = "servicebus.windows.net:sastoken"
JWT_TOKEN_TYPE = "jwt"
#: The scope the SDK asks an Entra ID credential for (its ``JWT_TOKEN_SCOPE``).
EVENTHUBS_SCOPE = "https://eventhubs.azure.net//.default"
SAS_LIFETIME_SECONDS = 3600
_REFRESH_AT = 0.9  # of a token's lifetime
_REPLY_CREDIT = 100


@dataclass(frozen=True)
class Token:
    """A token as put: its CBS type, the token itself, its expiry (seconds since the epoch)."""

    type: str
    value: str = ""
    expires_on: int = 0

    def __repr__(self) -> str:  # never the token itself
        return f"Token({self.type}, expires_on={self.expires_on})"


def sas_token(audience: str, key_name: str, key: str, expiry: int) -> str:
    """A shared access signature for ``audience`` until ``expiry``, signed as the SDK signs."""
    signed = f"{quote_plus(audience)}\n{expiry}".encode()
    signature = base64.b64encode(hmac.new(key.encode(), signed, hashlib.sha256).digest())
    # The key name is URL-encoded before the whole is (twice, then): the SDK's own quirk.
    fields = {"sr": audience, "sig": signature, "se": str(expiry), "skn": quote_plus(key_name)}
    return "SharedAccessSignature " + urlencode(fields)


class TokenSource:
    """Where a connection's tokens come from (see the module docstring)."""

    def token(self, audience: str) -> Token:
        raise NotImplementedError


class _SharedKey(TokenSource):
    def __init__(self, key_name: str, key: str) -> None:
        self._key_name = key_name
        self._key = key

    def token(self, audience: str) -> Token:
        expiry = int(time.time()) + SAS_LIFETIME_SECONDS
        return Token(SAS_TOKEN_TYPE, sas_token(audience, self._key_name, self._key, expiry), expiry)


class _Signature(TokenSource):
    def __init__(self, signature: str) -> None:
        self._signature = signature
        fields = dict(p.partition("=")[::2] for p in signature.split(" ", 1)[-1].split("&"))
        try:
            self._expiry = int(fields.get("se", ""))
        except ValueError:  # no expiry: it cannot be renewed anyway
            self._expiry = int(time.time()) + 10 * 365 * 86400

    def token(self, audience: str) -> Token:
        return Token(SAS_TOKEN_TYPE, self._signature, self._expiry)


class _Credential(TokenSource):
    def __init__(self, credential: Any) -> None:
        self._credential = credential

    def token(self, audience: str) -> Token:
        try:
            got = self._credential.get_token(EVENTHUBS_SCOPE)
        except Exception as exc:  # azure-identity's ClientAuthenticationError, and kin
            raise AuthorizationError(
                401, f"the credential gave no token: {type(exc).__name__}: {exc}"
            ) from exc
        return Token(JWT_TOKEN_TYPE, got.token, int(got.expires_on))


def token_source(settings: EventHubSettings) -> TokenSource:
    """The tokens ``settings`` authorize with: its connection string's key or signature, or
    its Entra ID credential (created here, in the process that reads)."""
    if settings.credential_type == "connection_string":
        parts = settings.connection_parts()
        if parts.shared_access_signature:
            return _Signature(parts.shared_access_signature)
        assert parts.shared_access_key_name and parts.shared_access_key
        return _SharedKey(parts.shared_access_key_name, parts.shared_access_key)
    return _Credential(settings.credential())


def audience_of(settings: EventHubSettings) -> str:
    """What the reader's tokens are for: the hub's consumer group, as the SDK's consumers say."""
    return f"sb://{settings.namespace}/{settings.eventhub_name}/consumergroups/{settings.consumer_group}"


class _RequestLink(Link):
    """Our sender on ``$cbs``: requests go out within the credit the service gave."""

    def __init__(self, name: str, handle: int) -> None:
        super().__init__(name, handle)
        self.credit = 0
        self.delivery_count = 0

    def on_flow(self, fields: list[Any]) -> None:
        if fields[6] is not None:
            count = fields[5] if fields[5] is not None else self.delivery_count
            self.credit = count + fields[6] - self.delivery_count


class _ReplyLink(Link):
    """Our receiver on ``$cbs``: answers, by the request's message id."""

    def __init__(self, name: str, handle: int) -> None:
        super().__init__(name, handle)
        self.answers: dict[Any, tuple[int, str]] = {}

    def on_transfer(self, fields: list[Any], payload: bytes) -> None:
        correlation, status, description = None, 0, ""
        i = 0
        while i < len(payload):
            section, i = decode(payload, i)
            code, value = section.descriptor, section.value
            if code == 0x73 and isinstance(value, list) and len(value) > 5:
                correlation = value[5]
            elif code == 0x74 and isinstance(value, dict):
                status = int(value.get("status-code") or 0)
                description = str(
                    value.get("status-description") or value.get("statusDescription") or ""
                )
        self.answers[correlation] = (status, description)


class Cbs:
    """The ``$cbs`` links of one connection and the token put on it."""

    def __init__(self, conn: Connection, tokens: TokenSource, audience: str) -> None:
        self._conn = conn
        self._tokens = tokens
        self._audience = audience
        self._request: _RequestLink | None = None
        self._reply: _ReplyLink | None = None
        self._renew_at = 0.0
        self._delivery_id = 0

    def _attach(self, deadline: float) -> tuple[_RequestLink, _ReplyLink]:
        conn = self._conn
        request = _RequestLink(f"cbs-request-{uuid.uuid4()}", conn.new_handle())
        reply = _ReplyLink(f"cbs-reply-{uuid.uuid4()}", conn.new_handle())
        for link, receiver in ((request, False), (reply, True)):
            conn.attach(
                link,
                receiver=receiver,
                source=framing.source("$cbs"),
                target=framing.target("$cbs"),
            )
        conn.pump(lambda: request.attached and reply.attached, deadline, "attaching to $cbs")
        conn.send_flow(handle=reply.handle, delivery_count=0, link_credit=_REPLY_CREDIT)
        return request, reply

    def authorize(self) -> None:
        """Put a token for the audience and wait for the service's answer; raises
        :class:`AuthorizationError` when it refuses it."""
        conn = self._conn
        deadline = time.monotonic() + conn.timeout
        if self._request is None or self._reply is None:
            self._request, self._reply = self._attach(deadline)
        request, reply = self._request, self._reply
        for link in (request, reply):
            if link.error is not None:
                raise link.error
        token = self._tokens.token(self._audience)
        conn.pump(lambda: request.credit > 0 or request.error is not None, deadline, "$cbs credit")
        message_id = uuid.uuid4()
        payload = _put_token(message_id, token, self._audience)
        delivery_id = conn.next_outgoing_id
        conn.send(
            framing.transfer(
                conn.channel,
                request.handle,
                delivery_id,
                delivery_id.to_bytes(4, "big"),
                payload,
                settled=False,
            )
        )
        conn.next_outgoing_id += 1
        request.credit -= 1
        request.delivery_count += 1

        def answered() -> bool:
            if reply.error is not None or request.error is not None:
                raise reply.error or request.error or AmqpError("amqp:internal-error")
            return message_id in reply.answers

        conn.pump(answered, deadline, "put-token")
        status, description = reply.answers.pop(message_id)
        if not 200 <= status < 300:
            raise AuthorizationError(status, description)
        lifetime = max(token.expires_on - time.time(), 0.0)
        self._renew_at = time.time() + _REFRESH_AT * lifetime

    def renew_if_due(self) -> None:
        """Put a fresh token when the last one is near its end (a time check otherwise)."""
        if self._renew_at and time.time() >= self._renew_at:
            self.authorize()


def _put_token(message_id: uuid.UUID, token: Token, audience: str) -> bytes:
    """The ``put-token`` request: message id, the four application properties, the token."""
    properties: list[Any] = [message_id] + [None] * 12
    application = {
        "name": audience,
        "operation": "put-token",
        "type": token.type,
        "expiration": Timestamp(token.expires_on * 1000),
    }
    return (
        framing.encode_section(0x73, properties)
        + framing.encode_section(0x74, application)
        + framing.encode_section(0x77, token.value)
    )
