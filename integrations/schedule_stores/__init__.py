"""Schedule stores for `executors.BackgroundService` that need a driver: MongoDB (pymongo, the
``mongo`` extra) and PostgreSQL (psycopg, the ``postgres`` extra).

The service finds them by URL scheme (``mongodb://``, ``postgresql://``) and imports them only
then, so the library itself imports no driver. They keep the contract of
`executors.stores` (the claim, the lease on the store's clock, the fenced completion).
"""

from __future__ import annotations

__all__ = ()
