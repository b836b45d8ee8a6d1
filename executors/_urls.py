"""Connection URLs in messages: shown as typed, the password hidden."""

from __future__ import annotations

import re

__all__ = ("redact",)

# scheme://user:password@host... -> scheme://user:***@host...
_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://[^:/@]*):[^@/]*@")


def redact(url: str) -> str:
    """*url* with the password of its ``user:password@`` part replaced by ``***``.

    Example:
        >>> redact("mongodb://alice:s3cret@db.example:27017/?tls=true")
        'mongodb://alice:***@db.example:27017/?tls=true'
    """
    return _PASSWORD.sub(r"\1:***@", url)
