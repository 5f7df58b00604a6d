"""Credential checks of the emulator's ``$cbs`` put-token: SAS signatures and test-mode JWTs.

The emulator knows shared access keys by name (``--key NAME=VALUE``; the default pair
:data:`DEFAULT_KEY_NAME` / :data:`DEFAULT_KEY_VALUE` is the one the Microsoft Event Hubs emulator
uses, and it is printed in the connection string: it is a well-known test value, not a secret).
A SAS token must be signed with one of them (HMAC-SHA256 over ``<url-encoded sr>\\n<se>``), not be
expired, and its ``sr`` must cover the audience asked for (the namespace, the hub, or the hub's
consumer group).

Entra ID: real Entra tokens are RS256 JWTs from login.microsoftonline.com, which an offline
emulator cannot verify. In *test mode* (``--jwt-test-secret SECRET``) the emulator accepts JWTs
signed HS256 with that secret, with audience ``https://eventhubs.azure.net`` and a future
``exp``; :class:`TestTokenCredential` / :class:`AsyncTestTokenCredential` issue them, so code
that takes an ``azure.core`` token credential runs unchanged. Without test mode every JWT is
refused (401), as is an unsigned (``alg: none``) or wrongly signed one.

Example::

    from dagster_eventhub_ingest.emulator.auth import Authenticator, TestTokenCredential

    auth = Authenticator({"RootManageSharedAccessKey": "SAS_KEY_VALUE"}, jwt_secret="s3")
    status, why = auth.check("jwt", TestTokenCredential("s3").get_token().token, "sb://h/hub")
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote_plus, unquote, unquote_plus, urlsplit

__all__ = [
    "DEFAULT_KEY_NAME",
    "DEFAULT_KEY_VALUE",
    "EVENTHUBS_AUDIENCE",
    "SAS_TOKEN_TYPE",
    "AsyncTestTokenCredential",
    "Authenticator",
    "TestTokenCredential",
    "make_test_jwt",
    "parse_key",
]

DEFAULT_KEY_NAME = "RootManageSharedAccessKey"
DEFAULT_KEY_VALUE = "SAS_KEY_VALUE"
SAS_TOKEN_TYPE = "servicebus.windows.net:sastoken"
JWT_TOKEN_TYPE = "jwt"
EVENTHUBS_AUDIENCE = "https://eventhubs.azure.net"
_CLOCK_SKEW_S = 300  # the service tolerates a few minutes of clock skew on nbf


def parse_key(spec: str) -> tuple[str, str]:
    """``"NAME=VALUE"`` -> ``(NAME, VALUE)``; ``ValueError`` naming what is wrong otherwise."""
    name, sep, value = spec.partition("=")
    if not sep or not name.strip() or not value:
        raise ValueError(
            f"{_redacted_spec(spec)!r} is not NAME=VALUE (e.g. 'listen=c2VjcmV0'): give the "
            "shared access key's name and its value"
        )
    return name.strip(), value


def _redacted_spec(spec: str) -> str:
    name, sep, _ = spec.partition("=")
    return f"{name}=***" if sep else spec if len(spec) < 4 else spec[:2] + "***"


def _normalise(uri: str) -> str:
    """``sb://Host:1/Hub/`` -> ``host:1/hub``: scheme dropped, lower case, no trailing slash."""
    if "://" in uri:
        parts = urlsplit(uri)
        uri = parts.netloc + parts.path
    return unquote(uri).strip("/").lower()


def _covers(scope: str, audience: str) -> bool:
    return audience == scope or audience.startswith(scope + "/")


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


class Authenticator:
    """Decides a put-token: ``check(token_type, token, audience, expiration)`` -> (status, why).

    Args:
        keys: shared access key name -> value. Empty: no SAS token is valid.
        jwt_secret: enables Entra ID test mode (HS256 JWTs signed with this secret).
        namespaces: host names (``host`` or ``host:port``) the emulator answers for; an audience
            on another host gets 404 like a namespace that does not exist. Empty: any host.
    """

    def __init__(
        self,
        keys: Mapping[str, str] | None = None,
        jwt_secret: str | None = None,
        namespaces: Iterable[str] = (),
    ) -> None:
        self.keys = dict(keys) if keys is not None else {DEFAULT_KEY_NAME: DEFAULT_KEY_VALUE}
        self.jwt_secret = jwt_secret
        self.namespaces = {n.lower().strip("/") for n in namespaces}

    def serves_host(self, audience: str) -> bool:
        """True if the audience's host is one this emulator answers for."""
        if not self.namespaces:
            return True
        host = _normalise(audience).split("/", 1)[0]
        return host in self.namespaces or host.split(":", 1)[0] in self.namespaces

    def check(
        self, token_type: str, token: str, audience: str, expiration: Any = None
    ) -> tuple[int, str]:
        """200 and "" when the token grants ``audience``; else 401 with the service-like reason."""
        now = time.time()
        if isinstance(expiration, (int, float)) and not isinstance(expiration, bool):
            seconds = expiration / 1000 if expiration > 1e11 else expiration
            if seconds < now:
                return 401, (
                    f"ExpiredToken: The token is expired. Expiration time: "
                    f"'{time.strftime('%Y-%m-%d %H:%M:%SZ', time.gmtime(seconds))}'"
                )
        if token_type == SAS_TOKEN_TYPE:
            return self._check_sas(token, audience, now)
        if token_type == JWT_TOKEN_TYPE:
            return self._check_jwt(token, now)
        return 400, (
            f"type {token_type!r} is not supported; expected '{SAS_TOKEN_TYPE}' or "
            f"'{JWT_TOKEN_TYPE}'"
        )

    def _check_sas(self, token: str, audience: str, now: float) -> tuple[int, str]:
        prefix = "SharedAccessSignature "
        if not token.startswith(prefix):
            return 401, "InvalidSignature: the token is not 'SharedAccessSignature sr=...'"
        raw: dict[str, str] = {}
        for part in token[len(prefix) :].split("&"):
            key, _, value = part.partition("=")
            raw[key.strip().lower()] = value
        missing = [k for k in ("sr", "sig", "se", "skn") if not raw.get(k)]
        if missing:
            return 401, f"InvalidSignature: the SAS token has no {', '.join(missing)}"
        try:
            expiry = int(unquote_plus(raw["se"]))
        except ValueError:
            return 401, "InvalidSignature: the SAS token's se (expiry) is not a number"
        if expiry < now:
            return 401, (
                "ExpiredToken: The token is expired. Expiration time: "
                f"'{time.strftime('%Y-%m-%d %H:%M:%SZ', time.gmtime(expiry))}'"
            )
        key_name = unquote_plus(raw["skn"])
        secret = self.keys.get(key_name)
        if secret is None:
            return 401, (
                f"InvalidSignature: The token has an invalid signature (no shared access key "
                f"named '{key_name}' on this namespace)."
            )
        resource = unquote_plus(raw["sr"])
        signature = unquote_plus(raw["sig"]).encode("ascii", "replace")
        # Clients sign the url-encoded resource as they sent it; some encode it differently.
        candidates = {raw["sr"], quote_plus(resource), quote_plus(resource).lower(), resource}
        for signed in candidates:
            digest = hmac.new(secret.encode(), f"{signed}\n{expiry}".encode(), hashlib.sha256)
            if hmac.compare_digest(base64.b64encode(digest.digest()), signature):
                break
        else:
            return 401, "InvalidSignature: The token has an invalid signature."
        if not _covers(_normalise(resource), _normalise(audience)):
            return 401, (
                f"InvalidAudience: The token's resource '{resource}' does not grant access to "
                f"'{audience}'."
            )
        return 200, ""

    def _check_jwt(self, token: str, now: float) -> tuple[int, str]:
        if self.jwt_secret is None:
            return 401, (
                "InvalidIssuer: this emulator is not in Entra ID test mode, so it accepts no "
                "JWT; start it with --jwt-test-secret SECRET and use its test credential, or "
                "use a shared access key"
            )
        parts = token.split(".")
        if len(parts) != 3:
            return 401, "InvalidToken: a JWT has three dot-separated parts"
        try:
            header = json.loads(_b64url_decode(parts[0]))
            claims = json.loads(_b64url_decode(parts[1]))
            signature = _b64url_decode(parts[2])
        except (ValueError, UnicodeDecodeError):
            return 401, "InvalidToken: the JWT is not base64url-encoded JSON"
        if not isinstance(header, dict) or not isinstance(claims, dict):
            return 401, "InvalidToken: the JWT header and claims must be JSON objects"
        if header.get("alg") != "HS256":
            return 401, (
                f"InvalidSignature: JWT algorithm {header.get('alg')!r} is not accepted (test "
                "mode takes HS256 signed with the emulator's test secret)"
            )
        expected = hmac.new(
            self.jwt_secret.encode(), f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256
        ).digest()
        if not hmac.compare_digest(expected, signature):
            return 401, "InvalidSignature: The token has an invalid signature."
        exp = claims.get("exp")
        if not isinstance(exp, (int, float)) or exp < now:
            return 401, "ExpiredToken: The token is expired (or has no exp claim)."
        nbf = claims.get("nbf")
        if isinstance(nbf, (int, float)) and nbf > now + _CLOCK_SKEW_S:
            return 401, "InvalidToken: The token is not valid yet (nbf)."
        aud = claims.get("aud")
        auds = aud if isinstance(aud, list) else [aud]
        if not any(isinstance(a, str) and a.rstrip("/") == EVENTHUBS_AUDIENCE for a in auds):
            return 401, f"InvalidAudience: The token audience must be '{EVENTHUBS_AUDIENCE}'."
        return 200, ""


def make_test_jwt(secret: str, lifetime: float = 3600.0, audience: str = EVENTHUBS_AUDIENCE) -> str:
    """An HS256 JWT that an emulator started with ``--jwt-test-secret secret`` accepts."""
    now = int(time.time())
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    claims = _b64url(
        json.dumps(
            {
                "aud": audience,
                "iss": "https://ehingest-emulator.invalid/test-mode",
                "iat": now,
                "nbf": now,
                "exp": int(now + lifetime),
                "oid": "00000000-0000-0000-0000-000000000000",
            }
        ).encode()
    )
    sig = hmac.new(secret.encode(), f"{header}.{claims}".encode(), hashlib.sha256).digest()
    return f"{header}.{claims}.{_b64url(sig)}"


class TestTokenCredential:
    """An ``azure.core`` TokenCredential issuing test-mode JWTs (for the sync SDK clients)."""

    __test__ = False  # not a pytest test class

    def __init__(self, secret: str, lifetime: float = 3600.0) -> None:
        self._secret = secret
        self._lifetime = lifetime

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        """A fresh token; ``scopes`` are ignored (the audience is always Event Hubs)."""
        from azure.core.credentials import AccessToken

        return AccessToken(
            make_test_jwt(self._secret, self._lifetime), int(time.time() + self._lifetime)
        )

    def close(self) -> None:
        """Nothing to release."""

    def __enter__(self) -> TestTokenCredential:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncTestTokenCredential:
    """The same for the ``azure.eventhub.aio`` clients (``await get_token(...)``)."""

    __test__ = False

    def __init__(self, secret: str, lifetime: float = 3600.0) -> None:
        self._sync = TestTokenCredential(secret, lifetime)

    async def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        """A fresh token; ``scopes`` are ignored."""
        return self._sync.get_token(*scopes, **kwargs)

    async def close(self) -> None:
        """Nothing to release."""

    async def __aenter__(self) -> AsyncTestTokenCredential:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
