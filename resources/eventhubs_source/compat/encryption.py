"""Connection strings encrypted by the connector's ``EventHubsUtils.encrypt``, without its jar.

It is obfuscation (AES/ECB with a key derived from the connector version), not protection; code
that wrapped its connection string this way keeps working, and a plain string works as well.
"""

from __future__ import annotations

import base64

from dagster_eventhub_ingest.resources.errors import ConfigurationError

__all__ = ["decrypt_connection_string", "encrypt_connection_string", "plain_connection_string"]

#: Connector versions whose EventHubsUtils.encrypt keys are tried (the key is the version).
_CONNECTOR_VERSIONS = tuple(f"2.3.{n}" for n in range(22, 14, -1))


def _cipher_key(version: str) -> bytes:
    from hashlib import pbkdf2_hmac

    # EventHubsUtils.getSecretKeySpec: PBKDF2WithHmacSHA256(password=version, salt=version,
    # 1000 iterations, 256 bits) used as an AES key.
    return pbkdf2_hmac("sha256", version.encode(), version.encode(), 1000, 32)


def encrypt_connection_string(connection_string: str, version: str = "2.3.22") -> str:
    """What the connector's ``EventHubsUtils.encrypt`` returns, without its jar.

    For code that wrapped its connection string with
    ``sc._jvm.org.apache.spark.eventhubs.EventHubsUtils.encrypt(...)``: the jar is not on a
    Spark 4 cluster, this function is its replacement. It is obfuscation (AES/ECB with a key
    derived from the connector version), not protection; a plain string works just as well.
    """
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    padder = padding.PKCS7(128).padder()
    data = padder.update(connection_string.encode("utf-8")) + padder.finalize()
    enc = Cipher(algorithms.AES(_cipher_key(version)), modes.ECB()).encryptor()
    return base64.b64encode(enc.update(data) + enc.finalize()).decode("ascii")


def decrypt_connection_string(text: str) -> str | None:
    """The plain connection string of a connector-encrypted one, or None if it is not one."""
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except ValueError:
        return None
    if not raw or len(raw) % 16:
        return None
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    for version in _CONNECTOR_VERSIONS:
        dec = Cipher(algorithms.AES(_cipher_key(version)), modes.ECB()).decryptor()
        unpadder = padding.PKCS7(128).unpadder()
        try:
            plain = unpadder.update(dec.update(raw) + dec.finalize()) + unpadder.finalize()
            value = plain.decode("utf-8")
        except ValueError:
            continue
        if "endpoint=" in value.lower():
            return value
    return None


def plain_connection_string(value: str, option: str) -> str:
    """``value`` as a plain connection string: as given, or decrypted; the error shows no value."""
    if "endpoint=" in value.lower():
        return value
    plain = decrypt_connection_string(value)
    if plain is None:
        # The value is not shown: it is a secret either way.
        raise ConfigurationError(
            f"{option}: neither a connection string ('Endpoint=sb://...;SharedAccessKeyName=...;"
            "SharedAccessKey=...[;EntityPath=<hub>]') nor one encrypted by the connector's "
            "EventHubsUtils.encrypt (versions 2.3.15-2.3.22); the value is not shown"
        )
    return plain
