"""What the stores share (`executors.stores`): the format check, the per-thread connection,
the read and conditional write of one record, a declaration's outcome, and how the service
asks a store for an optional capability (`offered`)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib
import itertools
import json
import re
import threading
import tracemalloc
from typing import Any, ClassVar

import pytest
from helpers.forking import in_forked_child

from executors.stores import (
    BACKENDS,
    FORMAT_VERSION,
    UTC,
    MemoryStore,
    Plan,
    ScheduleDefinition,
    ScheduleRecord,
    SQLiteScheduleStore,
    StoreFormatError,
    SupportsChangedSince,
    SupportsCompleteAndClaim,
    SupportsCompleteMany,
    SupportsWatch,
    ThreadConnections,
    changing,
    check_format,
    declaration,
    finish_claim,
    finish_record,
    new_record,
    no_store,
    offered,
    record_from_fields,
    rewrite,
    settle_claim,
    watch_thread,
)

NOON = dt.datetime(2026, 1, 1, 12, tzinfo=UTC)


def definition(period: float = 1.0) -> ScheduleDefinition:
    return ScheduleDefinition("job", {"type": "interval", "seconds": period}, "m:f")


@pytest.mark.parametrize("value, expected", [(None, None), ("1", 1), (1, 1), ("0", 0)])
def test_check_format_reads_a_format_this_code_can_read(value: object,
                                                        expected: int | None) -> None:
    """A recorded format (a number, or its text as SQL stores it) up to `FORMAT_VERSION` is
    read as a number; none recorded reads None."""
    assert check_format(value, "x:") == expected


@pytest.mark.parametrize("value, message", [
    (FORMAT_VERSION + 1, f"was written by store format {FORMAT_VERSION + 1}; this version"),
    ("new", "records store format 'new', not a number"),
    ("1.5", "records store format '1.5', not a number"),
    (True, "records store format 'True', not a number"),
])
def test_check_format_refuses_a_newer_format_or_one_that_is_not_a_number(
        value: object, message: str) -> None:
    """A newer format, or one that is not a whole number (a bool included: MongoDB could hold
    one), is a `StoreFormatError` naming the store and the value."""
    with pytest.raises(StoreFormatError, match="^shown " + re.escape(message)):
        check_format(value, "shown")


def test_no_store_names_the_store_and_what_is_missing() -> None:
    """The error of ``create=False`` where there is no store says where, what is missing,
    and that nothing was written."""
    error = no_store("sqlite:///x.db", "no executors_meta table")
    assert isinstance(error, StoreFormatError)
    assert str(error) == ("sqlite:///x.db holds no schedule store (no executors_meta table): "
                          "refused, nothing written")


def test_thread_connections_gives_each_thread_its_own_and_keeps_them_all() -> None:
    """One connection per thread, the same on every call from that thread; `all` lists every
    one made and `take_all` hands them over once."""
    made = itertools.count()
    conns: ThreadConnections[int] = ThreadConnections(lambda: next(made))
    mine = conns.get()
    assert conns.get() == mine
    other: list[int] = []
    thread = threading.Thread(target=lambda: other.append(conns.get()))
    thread.start()
    thread.join()
    assert other != [mine] and sorted(conns.all()) == sorted([mine, *other])
    assert sorted(conns.take_all()) == sorted([mine, *other]) and conns.all() == []


def test_thread_connections_opens_a_new_one_after_a_fork_or_when_closed() -> None:
    """A forked child never uses its parent's connection (a new one, `fresh` run for it);
    a connection found closed is replaced."""
    made = itertools.count()
    closed: set[int] = set()
    fresh: list[int] = []
    conns: ThreadConnections[int] = ThreadConnections(
        lambda: next(made), closed=closed.__contains__,
        fresh=lambda local: fresh.append(local.conn))
    parent = conns.get()
    assert in_forked_child(conns.get) != parent
    assert conns.get() == parent and fresh == [parent]
    closed.add(parent)
    assert conns.get() not in (parent, None) and len(fresh) == 2


def test_rewrite_reads_again_until_its_conditional_write_wins() -> None:
    """A write that lost (another writer changed the record since the read) is read and
    applied again; a step that writes nothing answers False with nothing written."""
    stored = [new_record(definition(), NOON)]
    reads = writes = 0

    def read() -> ScheduleRecord | None:
        nonlocal reads
        reads += 1
        return stored[0]

    def write(old: ScheduleRecord, new: ScheduleRecord) -> bool:
        nonlocal writes
        writes += 1
        if writes == 1:  # another writer got there first
            stored[0] = changing(paused=False)(stored[0]) or stored[0]
            return False
        if stored[0].version != old.version:
            return False
        stored[0] = new
        return True

    assert rewrite(read, changing(paused=True), write)
    assert (reads, writes) == (2, 2) and stored[0].paused and stored[0].version == 3
    assert not rewrite(lambda: None, changing(paused=True), write) and writes == 2


def test_declaration_says_what_to_write_and_asks_the_clock_only_when_needed() -> None:
    """Added, unchanged (the stored record, no clock read), changed (the old state, the next
    version) and replaced (above the unreadable record's version)."""
    asked: list[int] = []

    def first_fire() -> dt.datetime:
        asked.append(1)
        return NOON

    added = declaration(definition(), None, first_fire)
    assert added.outcome == "added" and added.record.version == 1 and len(asked) == 1
    same = declaration(definition(), added.record, first_fire)
    assert same.outcome == "unchanged" and same.record is added.record and len(asked) == 1
    changed = declaration(definition(2.0), added.record, first_fire)
    assert changed.outcome == "changed" and changed.record.version == 2
    replaced = declaration(definition(), None, first_fire, unreadable="bad", stored_version=7)
    assert (replaced.outcome, replaced.unreadable, replaced.record.version) == (
        "replaced", "bad", 8)


class _Counted(ScheduleDefinition):
    """A definition that counts how often its digest is computed."""

    computed: ClassVar[list[int]] = []

    def digest(self) -> str:
        self.computed.append(1)
        return super().digest()


def test_a_declaration_given_the_digest_computes_none_for_the_record_it_writes() -> None:
    """`declaration(..., digest=...)` (what a store computed once for its batch's read) writes
    that digest into the added, changed and replaced records and computes the declared
    definition's digest no more (10,000 schedules declared at start-up paid it twice)."""
    declared = _Counted("job", {"type": "interval", "seconds": 1.0}, "m:f")
    digest = definition().digest()
    stored = new_record(definition(2.0), NOON)
    _Counted.computed.clear()
    records = [declaration(declared, None, lambda: NOON, digest=digest).record,
               declaration(declared, stored, lambda: NOON, digest=digest).record,
               declaration(declared, None, lambda: NOON, digest=digest, unreadable="bad",
                           stored_version=3).record]
    assert _Counted.computed == []
    assert [r.digest for r in records] == [digest] * 3


class Forwarding:
    """A wrapper that forwards every attribute to its store (as the service's does)."""

    def __init__(self, inner: object) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_offered_checks_the_store_and_answers_with_the_wrapper(tmp_path: Any) -> None:
    """A capability the store has is answered with the object to call it through (the
    wrapper, when one is given); one it lacks is None."""
    sqlite = SQLiteScheduleStore(str(tmp_path / "jobs.db"))
    try:
        via = Forwarding(sqlite)
        assert offered(sqlite, SupportsCompleteMany, via) is via
        assert offered(sqlite, SupportsCompleteAndClaim) is sqlite
        assert offered(sqlite, SupportsChangedSince) is sqlite
        assert offered(sqlite, SupportsWatch, via) is None
        assert offered(MemoryStore(), SupportsCompleteMany) is None
    finally:
        sqlite.close()


class Unwatch:
    """A watch's stop function that names its thread, as PostgreSQL's listener does."""

    def __init__(self, thread: threading.Thread) -> None:
        self.thread = thread

    def __call__(self) -> None:
        pass


def test_watch_thread_is_the_thread_a_stop_function_names() -> None:
    """The service learns a watch's thread from a `WatchingThread`; a plain stop function
    (MongoDB's) names none."""
    thread = threading.Thread(target=lambda: None)
    assert watch_thread(Unwatch(thread)) is thread
    assert watch_thread(lambda: None) is None


@pytest.mark.parametrize("scheme", sorted(BACKENDS))
def test_every_scheme_names_a_store_class_its_module_holds(scheme: str) -> None:
    """The scheme table is data a reader can check: each entry's module imports (its driver
    installed) and holds the store class it names."""
    backend = BACKENDS[scheme]
    module = importlib.import_module(backend.module)
    assert isinstance(getattr(module, backend.attribute), type)
    assert backend.extra in (None, "mongo", "postgres")


def _cron_record_texts(count: int) -> list[str]:
    """`count` records of 6-field cron schedules, as JSON texts (each decoded apart, as a
    store decodes its rows)."""
    from executors.stores._records import record_fields
    from executors.triggers import Cron

    texts = []
    for k in range(count):
        definition = ScheduleDefinition(
            f"s{k:05d}", Cron(f"{k % 60} * * * * *", tz="UTC").to_data(), "jobs:tick",
            options={"missed": "latest", "grace": 30.0, "on_crash": "drop"})
        record = new_record(definition, dt.datetime(2026, 1, 1, tzinfo=UTC))
        texts.append(json.dumps(record_fields(record)))
    return texts


def test_decoded_records_share_their_words() -> None:
    """Two records decoded from separate texts share their definitions' keys and short
    strings (the target, the zone, the policies) and their counters' names: a store's
    10,000 records repeat a few dozen words the JSON decoder makes anew for each."""
    a, b = (record_from_fields(json.loads(text)) for text in _cron_record_texts(2))
    assert a.definition.trigger == b.definition.trigger | {"expression": "0 * * * * *"}
    key_a = next(k for k in a.definition.trigger if k == "expression")
    key_b = next(k for k in b.definition.trigger if k == "expression")
    assert key_a is key_b
    assert a.definition.trigger["tz"] is b.definition.trigger["tz"]
    assert a.definition.options["missed"] is b.definition.options["missed"]
    assert a.definition.target is b.definition.target
    assert list(a.counters) == list(b.counters)
    assert all(x is y for x, y in zip(a.counters, b.counters, strict=True))


def test_two_thousand_decoded_records_are_small() -> None:
    """2,000 decoded cron records hold under 1,500 bytes each (measured 1,168; 2,593 before
    their words were shared and their classes had slots)."""
    texts = _cron_record_texts(2000)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [record_from_fields(json.loads(text)) for text in texts]
        per_record = (tracemalloc.get_traced_memory()[0] - before) / len(kept)
    finally:
        tracemalloc.stop()
    assert per_record < 1500, per_record

def test_definitions_of_equal_data_share_their_mappings() -> None:
    """Definitions holding equal trigger, policies and keyword arguments hold one mapping of
    each (declared ones and those decoded from a store alike): 10,000 schedules of sixty
    expressions keep sixty trigger mappings, not 20,000. Data that is different JSON is not
    shared although Python calls it equal (1, 1.0 and True; 0.0 and -0.0), and a mapping
    holding a list is each definition's own; the digests stay those of the data."""
    from executors.triggers import Cron

    def made(name: str, **options: object) -> ScheduleDefinition:
        return ScheduleDefinition(name, Cron("5 * * * * *", tz="UTC").to_data(), "jobs:tick",
                                  kwargs={"limit": 3}, options=options)

    a, b = made("a", missed="latest", grace=30.0), made("b", missed="latest", grace=30.0)
    assert a.trigger is b.trigger and a.options is b.options and a.kwargs is b.kwargs
    (decoded,) = (record_from_fields(json.loads(text)) for text in _cron_record_texts(1))
    again = ScheduleDefinition.from_data("c", decoded.definition.as_data())
    assert again.trigger is decoded.definition.trigger
    assert again.options is decoded.definition.options

    kinds = [made(f"k{n}", grace=value) for n, value in enumerate((1, 1.0, True, 0.0, -0.0))]
    assert len({id(d.options) for d in kinds}) == 5
    assert len({d.digest() for d in kinds}) == 5
    assert [d.options["grace"] for d in kinds] == [1, 1.0, True, 0.0, -0.0]
    assert [type(d.options["grace"]) for d in kinds] == [int, float, bool, float, float]
    listed = [ScheduleDefinition(f"l{n}", {"type": "dates", "at": [1.0, 2.0]}, "jobs:tick")
              for n in range(2)]
    assert listed[0].trigger == listed[1].trigger and listed[0].trigger is not listed[1].trigger
    assert listed[0].digest() == listed[1].digest()


def test_definition_cache_decodes_a_text_once_and_names_what_it_cannot_read() -> None:
    """`DefinitionCache` answers a name's unchanged text with the definition it decoded, a
    changed text (or a forgotten name) with a new decoding, and refuses a text that is not
    a definition's object with the schedule's name (not JSON: `ValueError`)."""
    from executors.stores import DefinitionCache, StoreFormatError

    cache = DefinitionCache()
    text = json.dumps(ScheduleDefinition("a", {"type": "interval", "seconds": 5.0},
                                         "jobs:tick").as_data())
    first = cache.decode("a", text)
    assert cache.decode("a", text) is first and len(cache) == 1
    assert cache.decode("a", text.replace("jobs:tick", "jobs:tock")).target == "jobs:tock"
    again = cache.decode("a", text)
    assert again == first and again is not first
    cache.forget("a")
    assert len(cache) == 0 and cache.decode("a", text) is not again
    with pytest.raises(StoreFormatError, match="schedule 'b': 'definition' is not an object"):
        cache.decode("b", "[1, 2]")
    with pytest.raises(StoreFormatError, match="schedule 'b': 'target' must be a str"):
        cache.decode("b", text.replace('"jobs:tick"', "7"))
    with pytest.raises(ValueError):
        cache.decode("b", "{not json")
    assert len(cache) == 1


def test_finish_claim_finishes_only_the_record_that_holds_the_claim() -> None:
    """`finish_claim` is a completion's transition with its fence: the record `finish_record`
    makes while the record holds the claim (its token, a run in progress); None once another
    claim or a give-back moved it on, or with no record."""
    record = new_record(definition(), NOON)
    settled = settle_claim(record, "me", NOON, 30.0, lambda r, now: Plan(NOON, None),
                           lambda r: "drop", "token-1")
    assert settled is not None
    held, claim = settled
    assert claim is not None
    finished = finish_claim(held, claim, "ok")
    assert finished == finish_record(held, "ok")
    assert finished is not None and finished.counters["runs"] == 1
    assert finished.running_fire is None
    assert finish_claim(finished, claim, "ok") is None  # finished once: the fence is gone
    moved = dataclasses.replace(held, claim_token="token-2")
    assert finish_claim(moved, claim, "ok") is None
    assert finish_claim(None, claim, "ok") is None


def test_the_fast_makers_make_what_the_constructors_make_frozen_as_theirs() -> None:
    """`make_record` and `make_claim` (the claims' path) give records and claims equal to the
    dataclasses' own constructors', field for field, and as frozen; `_maker` refuses a class
    whose constructor does more than set its fields."""
    from executors.stores._records import (
        Claim,
        Plan,
        ScheduleRecord,
        _maker,
        make_claim,
        make_record,
    )

    at = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)
    values = (definition(), "digest", True, at, 7, "me", at + dt.timedelta(seconds=30), at, 2,
              {"runs": 3}, at - dt.timedelta(minutes=1), "ok", "token", "them")
    made, built = make_record(*values), ScheduleRecord(*values)
    assert made == built and repr(made) == repr(built) and type(made) is ScheduleRecord
    assert [getattr(made, f.name) for f in dataclasses.fields(made)] == list(values)
    claim_values = ("s", at, 1, 7, at, definition(), "token", True)
    assert make_claim(*claim_values) == Claim(*claim_values)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.version = 8  # type: ignore[misc]
    with pytest.raises(TypeError):
        make_record(*values[:-1])  # every field, as the constructor's positional call
    with pytest.raises(TypeError, match="Plan"):
        _maker(Plan)  # no slots
    with pytest.raises(TypeError, match="ScheduleDefinition"):
        _maker(type(definition()))  # a __post_init__ of its own
