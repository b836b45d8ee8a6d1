"""executors.aio: asyncio primitives done right (one event loop, no threads, no blocking calls)."""

from __future__ import annotations

from ._atomic import atomic as atomic

__all__ = ("atomic",)
