"""The stores `executors.aio.Traversal` walks: SQLite (`sqlite`) and PostgreSQL (`postgres`).

Each store brings its own driver (`sqlite3`; asyncpg, the ``test`` extra), so this package
re-exports nothing: import the store from its module.
"""

from __future__ import annotations

__all__ = ()
