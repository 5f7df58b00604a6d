"""Secrets never survive into error messages."""

import pytest

from dagster_eventhub_ingest.resources.errors import ConfigurationError, redact


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=abc+/=", "abc+/="),
        ("DefaultEndpointsProtocol=https;AccountName=a;AccountKey=Zm9v==;", "Zm9v=="),
        ("https://a.blob.core.windows.net/c?sv=2024&sig=s3cr3t%2F&se=1", "s3cr3t%2F"),
        ("SharedAccessSignature=SharedAccessSignature sr=x", "SharedAccessSignature sr=x"),
    ],
)
def test_redact_removes_secret(text: str, secret: str) -> None:
    assert secret not in redact(text)
    assert "***" in redact(text)


def test_errors_redact_their_message() -> None:
    err = ConfigurationError("bad connection string 'AccountName=a;AccountKey=hunter2'")
    assert "hunter2" not in str(err)
    assert "AccountName=a" in str(err)
