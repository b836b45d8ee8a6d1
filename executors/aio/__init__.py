"""executors.aio: asyncio primitives done right (one event loop, no threads, no blocking calls)."""

from __future__ import annotations

__all__ = ()
