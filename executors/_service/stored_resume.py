"""Resuming a stored schedule: the fire times that passed while it was paused are skipped.

Used by the store loop (``Job.resume()`` of a stored schedule) and by ``executors schedules
resume``, which talks to a store with no service.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .schedule_data import trigger_of
from .wallclock import WALK_BOUND

if TYPE_CHECKING:
    from executors.stores import ScheduleStore

__all__ = ("resume_record",)


def resume_record(store: ScheduleStore, name: str) -> tuple[bool, int]:
    """Resume the stored schedule `name`: the fire times that passed while it was paused are
    skipped by intent, as in memory (`WallSlots.resume`): not run, not missed; it runs at its
    next fire time after the store's now. ``(found, skipped)``; used by the service and by
    ``executors schedules resume``."""
    record = store.get(name)
    if record is None:
        return False, 0
    skipped = 0
    fire = record.next_fire
    if record.paused and fire is not None:
        now = store.now()
        trigger = trigger_of(record.definition.trigger)
        while fire is not None and fire <= now:
            skipped += 1
            # Past the walk's bound, straight to the first fire time after now.
            fire = trigger.next_after(now if skipped >= WALK_BOUND else fire)
        # Moved while still paused (no claim sees it in between), then resumed.
        if skipped and not store.set_next_fire(name, fire):
            return False, 0
    return store.set_paused(name, False), skipped
