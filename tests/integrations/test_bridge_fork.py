"""The bridge after ``os.fork()``: shared primitives and loop-only ones used through a Portal.

A forked child has one thread: the parent's other threads, their parked waits and the loops they
ran are gone. Each test forks for real (`helpers.forking.in_forked_child`) with waiters parked at
fork time and checks, in the child, that those dead waiters are skipped and the primitive serves
the child's own parties.
"""

from __future__ import annotations

import asyncio
import os
import threading

import pytest
from helpers.forking import in_forked_child

from executors import ShutdownError
from executors.aio import Semaphore
from executors.testing import wait_until
from integrations.bridge import Portal, SharedLock, SharedSemaphore

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def test_shared_semaphore_drops_dead_waiters_in_the_child() -> None:
    """A thread and a task of another thread's loop are parked on a SharedSemaphore, and a third
    thread is inside its mutex, at fork time. In the child the mutex is fresh (no deadlock), the
    dead waiters are gone, and a release frees the permit for the child's own acquire."""
    sem = SharedSemaphore(1)
    assert sem.blocking.acquire()
    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever)
    loop_thread.start()
    parked_task = asyncio.run_coroutine_threadsafe(sem.acquire(), loop)
    wait_until(lambda: sem.statistics().waiting == 1)
    parked_thread = threading.Thread(target=sem.blocking.acquire)
    parked_thread.start()
    wait_until(lambda: sem.statistics().waiting == 2)
    inside, leave = threading.Event(), threading.Event()

    def hold_mutex() -> None:
        sem._mutex.acquire()  # as a section of ours would, at the moment of the fork
        inside.set()
        leave.wait(30)
        sem._mutex.release()

    holder = threading.Thread(target=hold_mutex)
    holder.start()
    assert inside.wait(10)
    try:
        def in_child() -> list[object]:
            waiting = sem.statistics().waiting
            sem.release()
            taken = sem.blocking.acquire(timeout=5)
            return [waiting, taken, sem.statistics().value]

        assert in_forked_child(in_child) == [0, True, 0]
    finally:
        leave.set()
        holder.join(10)
    # The parent is untouched: its waiters are still served in order.
    sem.release()
    parked_task.result(10)
    sem.release()
    parked_thread.join(10)
    assert not parked_thread.is_alive()
    loop.call_soon_threadsafe(loop.stop)
    loop_thread.join(10)
    loop.close()


def test_shared_lock_keeps_working_in_the_child() -> None:
    """A SharedLock used before the fork works in the child from threads and tasks alike."""
    lock = SharedLock()
    with lock.blocking:
        pass

    def in_child() -> bool:
        async def task() -> bool:
            async with lock:
                return lock.locked()

        with lock.blocking:
            pass
        return asyncio.run(task())

    assert in_forked_child(in_child) is True


def test_loop_only_semaphore_skips_portal_thread_waiters_parked_before_the_fork() -> None:
    """A thread parked (through a Portal view) on a loop-only executors.aio.Semaphore at fork
    time does not exist in the child: the child's release skips its dead ThreadWaiter, so the
    child's own task gets the permit instead of it being lost. The parent's portal is closed in
    the child (ShutdownError), and a new Portal works there."""
    sem = Semaphore(0)
    with Portal() as portal:
        view = portal.semaphore(sem)
        parked = threading.Thread(target=view.acquire)
        parked.start()
        wait_until(lambda: sem.statistics().waiting == 1)

        def in_child() -> list[object]:
            with pytest.raises(ShutdownError):
                portal.call(asyncio.sleep, 0)

            async def main() -> bool:
                sem.release()
                async with asyncio.timeout(5):
                    await sem.acquire()
                return True

            got = asyncio.run(main())
            with Portal() as fresh:
                view2 = fresh.semaphore(sem)
                view2.release()
                return [got, view2.acquire(timeout=5)]

        assert in_forked_child(in_child) == [True, True]
        view.release()  # serve the parent's parked thread (the parent is untouched)
        parked.join(10)
        assert not parked.is_alive()
