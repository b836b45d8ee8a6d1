"""Connection URLs in the command's messages: the library's one rule (`executors._urls`)."""

from __future__ import annotations

from executors._urls import redact as redact

__all__ = ("redact",)
