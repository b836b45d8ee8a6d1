"""Deprecated: the SQLite traversal store moved to `integrations.traversal_stores.sqlite`.

This name stays so existing imports keep working; importing it warns (DeprecationWarning), as
trio did for ``trio.hazmat`` when it became ``trio.lowlevel`` (0.15).
"""

from __future__ import annotations

import warnings

from .traversal_stores.sqlite import SCHEMA as SCHEMA
from .traversal_stores.sqlite import SQLiteStore as SQLiteStore
from .traversal_stores.sqlite import SQLiteStoreStatistics as SQLiteStoreStatistics
from .traversal_stores.sqlite import SQLiteTransaction as SQLiteTransaction

__all__ = ("SQLiteStore", "SQLiteStoreStatistics", "SQLiteTransaction", "SCHEMA")

warnings.warn("integrations.sqlite_store is deprecated: import from "
              "integrations.traversal_stores.sqlite", DeprecationWarning, stacklevel=2)
