"""The waiters that shared primitives park: a thread's or a task's, each with a one-shot claim.

A *shared primitive* (`SharedChannel`, `SharedSemaphore`, `SharedLock`, `Queue`) keeps its state
behind its own short ``threading.Lock`` (its *mutex*) and parks whoever must wait as one of the
waiters below, in a FIFO of its own. The API, for a primitive's author:

- **Park.** A thread makes ``w = SharedThreadWaiter()``; a task makes ``w = SharedTaskWaiter()``
  on its running loop (the loop's `LoopWaker` is captured then). Under the mutex, after the
  fast path failed, append ``w`` (or a registration pointing to it) to the FIFO. A select appends
  ONE waiter to every case's FIFO.
- **Hand over.** Under the mutex, pop the head and call ``w.claim(value)``: it stores `value` on
  the waiter and takes the waiter's one-shot token *in one step*, then starts the wake-up. True:
  the waiter owns `value` now (the hand-off's linearization point). False: the waiter is gone
  (gave up, already claimed through another case of its select, its loop is closed); the
  primitive keeps `value` and tries the next waiter. A permit is just a value (``claim(None)``).
  `claim` never blocks and runs no user code: a thread waiter's lock is released, a task
  waiter's future is resolved directly when the claimer runs on the task's loop, else posted to
  the loop's waker (one ``call_soon_threadsafe`` per burst).
- **Or hand over now, wake later.** ``w.take(value)`` is the claim without the wake-up (same
  linearization point, same result); the claimer calls ``w.wake()`` for every taken waiter
  *after* releasing the mutex. Waking inside the mutex lets the woken thread take the GIL while
  the mutex is still held, and the next party (often the loop thread) then blocks on that mutex
  (research/bridge_shared_state.md, risk 1). ``wake()`` is False only for a task whose loop
  closed between the take and the wake: the primitive then takes its mutex again and, if
  ``w.value`` is still set, resets it to `UNSET` and hands the value back as if the take had
  failed (whoever else hands a claimed waiter's value back resets it too, so it goes back once).
- **Wait.** A thread calls ``w.wait(timeout)``: True when claimed (the value is in ``w.value``),
  False when the timeout expired and the thread gave up first (it owns nothing; remove its
  registration under the mutex). A timeout that loses the race with a claim returns True: the
  hand-off's result stands. A task awaits ``w.future`` and then reads ``w.value``.
- **Give up.** ``w.abandon()``: True if the waiter owned nothing and now never will (remove its
  registration under the mutex); False if it was claimed first. A thread interrupted (Ctrl-C)
  anywhere from its parking to the end of `wait` (the exception may come before `wait` began)
  calls ``w.settle()`` (it gives up, or waits for the claim's value; idempotent), then checks
  ``w.claimed`` and hands ``w.value`` back. A cancelled task calls ``abandon()``;
  on False, ``w.value`` is valid once the task has acquired (and released) the mutex of every
  primitive the waiter is registered with: the claim stored it under one of them. Its leave
  section takes that mutex anyway, then hands the value (or permit) back.
- A waiter is used once (one wait); make a new one for the next.

Why claim and store are one step: if the token were taken before the value is stored, a
cancellation landing in between would find the waiter claimed but empty, and report a taken
send as not sent or lose a received value (research/bridge_shared_state.md, bug 2). Here the
claimer holds the mutex across both, and whoever inspects a claimed waiter either waits for the
thread waiter's lock (released after the store) or takes that mutex first.

**Owed values and a closing loop.** A task waiter made with an *owner* (the primitive, which
implements ``_lost(waiter)``) is recorded, from its take until the task consumes what it was
handed (`SharedTaskWaiter.consume`) or hands it back, in its loop's *owed* set. That set belongs
to a sentinel timer parked in the loop (`_waker`); a loop that is closed drops its timers, and
the sentinel then passes every owed waiter to its owner: the value or permit goes to the next
party, not to a task that will never run again. ``_lost`` runs under the owner's mutex (or is
deferred to the thread inside it) and does nothing for a waiter whose ``value`` is already
`UNSET`: every hand-back path resets it under that mutex, so each value goes back once.

**Signals (Ctrl-C).** A signal handler runs, and may raise, only in the main thread and only at
an *eval-breaker checkpoint*: the start of a Python function, a loop's backward jump, and the
return of most calls into C. The one-shot claim is therefore a ``del token[0]`` (a
``DELETE_SUBSCR``, no checkpoint) followed by the store of the value (no checkpoint either): a
take is atomic with respect to signals once the function has started. A wake-up must happen
once a waiter is taken, so sections wake through `wake_or_hold`, which retries the wake-up when
a signal handler raises inside it and *holds* the exception; the section's caller raises it with
`raise_held` after leaving the mutex.

Atomic operations relied on (no reliance on the GIL beyond these; each is atomic on
free-threaded CPython as well, where list and deque operations take the object's own lock):

- ``del token[0]`` on the one-element token list: exactly one of any number of concurrent
  callers removes the element, the others get ``IndexError``. That is the one-shot claim, and
  ``abandon`` is the same deletion (so "claimed" and "gave up" cannot both win).
- Storing and popping a key of a loop's owed dict (from any thread).
- ``threading.Lock.release``/``acquire`` for a thread waiter's parking (the release
  happens-before the acquire that returns, so the stored value is seen by the woken thread).
- ``collections.deque.append``/``popleft`` inside `LoopWaker.post`/flush (see `_waker`).
- Reading or writing one attribute (``value``, ``future``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import ClassVar, Final, Protocol, final

from ._waker import last_waker, owed_set, running_loop, waker_for

__all__ = ("SharedWaiter", "SharedThreadWaiter", "SharedTaskWaiter", "UNSET", "Owner",
           "wake_or_hold", "hold", "raise_held", "held", "drop_held", "finish",
           "COMPLETED_NOTE", "THREAD")


class _Unset:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"


#: ``value`` of a waiter that has not been handed anything (or has consumed or returned it).
UNSET: Final = _Unset()

_MAIN: Final = threading.main_thread().ident
#: The exception a signal handler raised inside a section, held until the section's caller
#: left its mutex. Signal handlers run only in the main thread, so one slot is enough.
_HELD: list[BaseException | None] = [None]


class _ThreadFlags(threading.local):
    """Per thread, read with no call (an attribute of a C type): see `THREAD`."""

    #: True in the thread that holds exceptions (the main thread), once it held one.
    holds = False


#: An operation's last ``except`` clause, the one an exception leaves it by, is written with no
#: call and no loop between its first instruction and its ``raise``: a signal handler's
#: exception lands only at a checkpoint (design.md, "Ctrl-C"), and one raised in that clause
#: would leave without what the clause does. An exception still held for the caller leaves
#: instead of the one caught (a Ctrl-C is not lost behind a timeout, and two signals make one
#: exception, not one now and one at the next call). Once the operation took effect (a send or
#: a release completed), the exception that leaves carries `COMPLETED_NOTE`::
#:
#:     except BaseException as exc:
#:         late = _HELD[0] if THREAD.holds else None
#:         out = exc if late is None else late  # the one that leaves
#:         if late is not None:
#:             _HELD[0] = None
#:         if completed:
#:             if "__notes__" not in out.__dict__:
#:                 out.__notes__ = [COMPLETED_NOTE]
#:             elif COMPLETED_NOTE not in out.__notes__:
#:                 out.__notes__ += [COMPLETED_NOTE]
#:         if late is not None:
#:             raise late
#:         raise
#:
#: An operation that returns, or raises an error of its own (a timeout, a full channel) outside
#: that clause, raises a held exception first. A clause that cleans up (through `finish`) does
#: so first, and ends the same way; where the exception it handles may be the operation's own
#: error rather than a signal's, it keeps a second signal's exception, the one its ladder
#: catches, and raises that (`Queue.sync_q.put`). The test
#: ``tests/integrations/test_bridge_signal_checkpoints.py`` raises at every checkpoint of each
#: operation, and at every pair of them, and checks all of this.
THREAD: Final = _ThreadFlags()


def hold(exc: BaseException) -> None:
    """Keep `exc` (a signal handler's exception caught inside a section) for `raise_held`.

    In the main thread only (signal handlers run nowhere else): elsewhere `exc` is not a
    signal's, and is raised again.
    """
    if threading.get_ident() != _MAIN:
        raise exc
    THREAD.holds = True
    if _HELD[0] is None:
        _HELD[0] = exc


def held() -> bool:
    """True if an exception is held (cheap: the check every section exit makes)."""
    return _HELD[0] is not None


#: The note on a held exception raised after its operation took effect (a send, a release).
COMPLETED_NOTE: Final = ("executors.bridge: raised after the operation completed (a signal "
                         "handler raised it inside a section; it was held until the end)")


def raise_held(completed: bool = False) -> None:
    """Raise the held exception, if any (call after leaving every mutex).

    With `completed`, the operation took effect before: the exception says so in a note
    (`COMPLETED_NOTE`), so that a caller can tell it from one raised before anything happened.
    """
    exc = _HELD[0]
    if exc is not None and threading.get_ident() == _MAIN:  # the main thread's to raise
        _HELD[0] = None
        if completed:
            exc.add_note(COMPLETED_NOTE)
        raise exc


def finish(fn: Callable[..., object], *args: object) -> None:
    """Run ``fn(*args)`` to its end, whatever signal handlers raise meanwhile (Ctrl-C).

    For the ``except`` clause of a thread's operation, which must hand back or leave what the
    interrupted operation left half-done. Its first statement, as::

        try:
            finish(fn, *args)
        except BaseException:  # a second signal at finish's first instruction
            finish(fn, *args)

    so that a second signal's exception (they do come back to back: design.md, "Ctrl-C")
    lands where it is caught, and only a third one, at the second call's first instruction,
    can escape. `fn` must be restartable (each run skips what an interrupted run did) and
    raise nothing of its own; a signal's exception raised inside is held (`hold`) and `fn`
    run again. The clause then ends as `THREAD` shows: one Ctrl-C comes out, not one per
    signal.
    """
    while True:
        try:
            while True:
                try:
                    fn(*args)
                    return
                except BaseException as exc:
                    hold(exc)  # raises it again outside the main thread: not a signal's
        except BaseException as exc:
            hold(exc)


def drop_held() -> None:
    """Forget a held exception (an exception of the same kind is propagating already).

    A call: not for an operation's last clause (see `THREAD`)."""
    if threading.get_ident() == _MAIN:
        _HELD[0] = None


class Owner(Protocol):
    """A primitive that can take back what a task waiter was handed and never used."""

    def _lost(self, waiter: SharedTaskWaiter) -> None: ...


class SharedWaiter:
    """A party parked in a shared primitive's FIFO (see the module docstring). Hashable by id."""

    __slots__ = ("__weakref__", "_token", "value")

    #: True for a task: a claimed task must still resume on its loop before it uses the value,
    #: and may be cancelled before that (it then hands the value back). A channel counts such
    #: values as in flight. False for a thread: a successful claim completes the hand-off.
    resumes_on_loop: ClassVar[bool] = False

    def __init__(self) -> None:
        self._token: list[None] = [None]
        self.value: object = UNSET

    def claim(self, value: object) -> bool:
        """Store `value` and take the waiter, under the primitive's mutex; True if it took it."""
        if not self.take(value):
            return False
        # Taken: the wake-up must happen. The `try` starts right at the return of `take` (no
        # checkpoint in between): a signal handler raising at `wake`'s first instruction is
        # caught here, not at the first instruction of a retrying helper (which would leave
        # the waiter taken and never woken: a thread stuck, a value lost).
        try:
            woke = self.wake()
        except BaseException as exc:
            woke = wake_or_hold(self, exc)
        if woke:
            return True
        self.value = UNSET  # see SharedTaskWaiter.wake: the claimer keeps the value
        return False

    def take(self, value: object) -> bool:
        """`claim` without the wake-up: the caller calls `wake` after leaving its mutex."""
        token = self._token
        try:
            del token[0]  # no checkpoint from here to the return: atomic w.r.t. signals
        except IndexError:
            return False
        self.value = value
        return True

    def wake(self) -> bool:
        """Start the wake-up of a taken waiter (no lock needed); False: its loop is closed.

        Idempotent: waking a woken waiter again does nothing harmful (a retry after Ctrl-C).
        """
        raise NotImplementedError

    def abandon(self) -> bool:
        """Give up: True if nothing was (or ever will be) handed to this waiter."""
        token = self._token
        try:
            del token[0]
        except IndexError:
            return False
        return True

    @property
    def claimed(self) -> bool:
        """True once the token is taken and the value stored (for a thread: after `wait`)."""
        return self.value is not UNSET

    @property
    def waiting(self) -> bool:
        """True while the token is still there: nobody claimed the waiter, it did not give up."""
        return bool(self._token)


def wake_or_hold(waiter: SharedWaiter, exc: BaseException | None = None) -> bool:
    """``waiter.wake()``, completed even if a signal handler raises meanwhile (Ctrl-C).

    The exception is held (`hold`) and the wake-up retried: a taken waiter must be woken, or it
    waits forever holding a value nobody else can get. Call it from the ``except`` of a ``try``
    around the first ``waiter.wake()`` (with `exc`, the exception caught there): calling it
    straight after a take would leave its own first instruction (a checkpoint) between the take
    and any ``try``. Two nested loops: the outer one catches an exception raised at the inner
    loop's backward jump, so an exception escapes only if more signal handlers raise within
    the few instructions between a caught exception and the next backward jump (see design.md,
    "Ctrl-C": that needs a GIL switch at each of those instructions).
    """
    while True:
        try:
            while True:
                try:
                    if exc is not None:
                        pending, exc = exc, None
                        hold(pending)
                    return waiter.wake()
                except BaseException as caught:
                    hold(caught)  # raises it again outside the main thread: not a signal's
        except BaseException as caught:
            hold(caught)


@final
class SharedThreadWaiter(SharedWaiter):
    """A plain thread parked in a shared primitive: it blocks on a lock of its own (no CPU)."""

    __slots__ = ("_parked", "_settled")

    resumes_on_loop: ClassVar[bool] = False

    def __init__(self) -> None:
        self._token = [None]  # SharedWaiter.__init__ inlined: made on every parking
        self.value = UNSET
        # Set when it gave up (`abandon`) or `settle` saw its claim's value: `settle` then
        # returns at once (the value may have been handed back and reset since).
        self._settled = False
        self._parked = threading.Lock()
        self._parked.acquire()  # released once, by the claimer, after storing the value

    def abandon(self) -> bool:
        token = self._token  # SharedWaiter.abandon, and the record `settle` reads
        try:
            del token[0]
        except IndexError:
            return False
        self._settled = True  # no checkpoint between the deletion and this store
        return True

    def wake(self) -> bool:
        try:
            self._parked.release()
        except RuntimeError:  # woken already (a retry after Ctrl-C): nothing to do
            pass
        return True

    def wait(self, timeout: float | None) -> bool:
        """Block until claimed (True) or `timeout` seconds pass and the thread gives up (False).

        A claim that wins against the timeout makes this return True. An exception raised while
        blocked (KeyboardInterrupt from a signal handler) propagates only after the waiter gave
        up or its delivery completed: the caller then checks `claimed` and hands the value back.
        """
        parked = self._parked
        try:
            if timeout is None:
                if parked.acquire():
                    return True
            elif parked.acquire(True, max(timeout, 0.0)):
                return True
        except BaseException:
            self.settle()
            raise
        if self.abandon():
            return False
        self.settle()
        return True

    def settle(self) -> None:
        """The thread stops waiting (or will not start: an exception between its parking and
        `wait`): give up, or, if a claim won, wait until its value is stored (`claimed`)."""
        # Either it gives up now, or a claimer took the token first and stores the value within
        # a few instructions under its mutex. Wait for the value itself, not for the lock: the
        # thread may already hold the lock (an exception raised just after acquire returned).
        # Idempotent: a caller whose `wait` raised settles again (it cannot tell whether the
        # exception came before `wait` began or from inside it, which settled already).
        if self._settled or self.abandon():
            return  # it gave up (now, or before: at its timeout), or settled before
        parked = self._parked
        while self.value is UNSET:
            try:
                parked.acquire(True, 0.001)
            except BaseException:  # a second Ctrl-C: the delivery is still imminent, wait on
                continue
        self._settled = True

    def __repr__(self) -> str:
        state = "claimed" if self.claimed else "waiting" if self._token else "gave up"
        return f"<SharedThreadWaiter {state}>"


@final
class SharedTaskWaiter(SharedWaiter):
    """A task parked in a shared primitive: a future of its loop and that loop's waker.

    Make it on the task's running loop. The future is resolved only on that loop's thread:
    directly when the claimer runs there, else through the loop's `LoopWaker`. A claim on a
    closed loop fails (the task will never run): the primitive serves the next party.

    With an `owner`, a take records the waiter in its loop's owed set until the task calls
    `consume` (it resumed and used the value) or the value is handed back; if the loop closes
    first, the owner gets it back (`lost`).
    """

    __slots__ = ("_loop", "_owed", "future", "owner", "waker")

    resumes_on_loop: ClassVar[bool] = True

    def __init__(self, owner: Owner | None = None) -> None:
        self._token = [None]  # SharedWaiter.__init__ inlined: made on every parking
        self.value = UNSET
        loop = asyncio.get_running_loop()
        self._loop = loop
        self.future: asyncio.Future[None] = loop.create_future()
        # `waker_for` and `owed_set`, their common case inlined (a task parks on every
        # contended acquire: two Python calls are a measurable share of that path).
        waker = last_waker[0]
        if waker is None or waker._loop_ref() is not loop:
            waker = waker_for(loop)
        self.waker = waker
        self.owner = owner
        if owner is None:
            self._owed = None
        else:
            ref = waker._sentinel
            sentinel = ref() if ref is not None else None
            self._owed = sentinel.owed if sentinel is not None else owed_set(waker, loop)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def take(self, value: object) -> bool:
        if self._loop.is_closed():
            self.abandon()  # dead: nobody can ever resume it
            return False
        token = self._token  # SharedWaiter.take inlined, then the owed record
        try:
            del token[0]
        except IndexError:
            return False
        self.value = value
        owed = self._owed
        if owed is not None:
            # A dict item store, not ``set.add``: no call, so no checkpoint between the take and
            # the return (a signal handler raising after ``add`` returned would leave the
            # waiter taken while its taker saw an exception, and never woken).
            owed[self] = None
        return True

    def wake(self) -> bool:
        # False: the loop closed after the take, the task never resumes, so it never took the
        # value. `claim` undoes the store at once (nobody else can see this waiter: its token is
        # gone); a primitive that woke after leaving its mutex undoes it under the mutex.
        if running_loop() is self._loop:
            future = self.future  # the hand-off between tasks of one loop
            if not future.done():
                future.set_result(None)
            return True
        return self.waker.post(self)

    def consume(self) -> object:
        """The task resumed: take the value it was handed (now nobody can hand it back)."""
        value = self.value
        self.value = UNSET
        owed = self._owed
        if owed is not None:
            owed.pop(self, None)
        return value

    def returned(self) -> None:
        """The value was handed back (under the owner's mutex): forget the owed record."""
        owed = self._owed
        if owed is not None:
            owed.pop(self, None)

    def lost(self) -> None:
        """The loop closed (or is gone) before the task used what it was handed: give it back."""
        owner = self.owner
        if owner is not None:
            owner._lost(self)

    def __repr__(self) -> str:
        state = "claimed" if self.claimed else "waiting" if self._token else "gave up"
        return f"<SharedTaskWaiter {state} loop={id(self._loop):#x}>"
