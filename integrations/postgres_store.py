"""Deprecated: the PostgreSQL traversal store moved to `integrations.traversal_stores.postgres`.

This name stays so existing imports keep working; importing it warns (DeprecationWarning), as
trio did for ``trio.hazmat`` when it became ``trio.lowlevel`` (0.15).
"""

from __future__ import annotations

import warnings

from .traversal_stores.postgres import SCHEMA as SCHEMA
from .traversal_stores.postgres import PostgresStore as PostgresStore
from .traversal_stores.postgres import PostgresStoreStatistics as PostgresStoreStatistics
from .traversal_stores.postgres import PostgresTransaction as PostgresTransaction

__all__ = ("PostgresStore", "PostgresStoreStatistics", "PostgresTransaction", "SCHEMA")

warnings.warn("integrations.postgres_store is deprecated: import from "
              "integrations.traversal_stores.postgres", DeprecationWarning, stacklevel=2)
