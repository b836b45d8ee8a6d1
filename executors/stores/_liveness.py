"""How the stores tell that a run's owner is gone: the timings the backends share.

See "A dead owner is not waited for" in `executors.stores`: each store looks for the runs of
gone owners at most every `LIVENESS_EVERY` seconds; MongoDB's owners beat every `OWNER_BEAT`
seconds and are gone after `OWNER_STALE`.
"""

from __future__ import annotations

__all__ = ("LIVENESS_EVERY", "OWNER_BEAT", "OWNER_STALE")

#: How old a MongoDB owner's heartbeat is (seconds, on the server's clock) when the owner is
#: taken for gone: five beats missed.
OWNER_STALE = 1.25
#: How often a MongoDB owner writes its heartbeat (seconds, on its monotonic clock).
OWNER_BEAT = OWNER_STALE / 5
#: The least time between two looks of one store object for the runs of gone owners
#: (seconds): a claim more often than this (a busy loop) does not pay for the look.
LIVENESS_EVERY = 0.25
