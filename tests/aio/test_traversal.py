"""Tests of executors.aio.traversal: order per mode, batches, retries, mutation, limits."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import executors.aio
from executors.aio import (
    CursorEntry,
    Entry,
    Kind,
    Semaphore,
    Store,
    Transaction,
    Traversal,
    Visit,
    default_limiter,
    traverse,
)
from executors.errors import TransactionExpired, TransactionRetry

Path = tuple[str, ...]
Tree = dict[str, "Tree | None"]  # None: a file


# -- a transactional in-memory store with virtual time, failures and mutation -----------------


class MemoryStore:
    """Snapshot-isolated tree; time moves `cost` per read; failures and mutation injected."""

    def __init__(self, tree: Tree, *, cost: float = 1.0, fail: float = 0.0, seed: int = 0,
                 mutate: Callable[[MemoryStore], None] | None = None) -> None:
        self.now = 0.0
        self.cost = cost
        self.fail = fail
        self.rng = random.Random(seed)
        self.mutate = mutate
        self.next_key = 1
        self.nodes: dict[int, tuple[int | None, str, Kind]] = {0: (None, "", Kind.DIR)}
        self.in_flight = 0
        self.max_in_flight = 0
        self.committed: list[tuple[Path, Kind | None]] = []
        self.begun = 0
        self._add(0, tree)

    def clock(self) -> float:
        return self.now

    def _add(self, parent: int, tree: Tree) -> None:
        for name, sub in tree.items():
            key = self.new(parent, name, Kind.FILE if sub is None else Kind.DIR)
            if sub is not None:
                self._add(key, sub)

    def new(self, parent: int, name: str, kind: Kind) -> int:
        key = self.next_key
        self.next_key += 1
        self.nodes[key] = (parent, name, kind)
        return key

    def find(self, path: Path) -> int | None:
        return find(self.nodes, path)

    def paths(self) -> dict[int, Path]:
        return {k: path_of(self.nodes, k) for k in self.nodes}

    async def begin(self, *, budget: float) -> MemoryTransaction:
        if self.mutate is not None and self.begun:
            self.mutate(self)
        self.begun += 1
        return MemoryTransaction(self, dict(self.nodes), self.now + budget)


def find(nodes: dict[int, tuple[int | None, str, Kind]], path: Path) -> int | None:
    key = 0
    for name in path:
        nxt = [k for k, (p, n, _) in nodes.items() if p == key and n == name]
        if not nxt:
            return None
        key = nxt[0]
    return key


def path_of(nodes: dict[int, tuple[int | None, str, Kind]], key: int) -> Path:
    out: list[str] = []
    while key != 0:
        parent, name, _ = nodes[key]
        out.append(name)
        assert parent is not None
        key = parent
    return tuple(reversed(out))


class MemoryTransaction:
    def __init__(self, store: MemoryStore, nodes: dict[int, tuple[int | None, str, Kind]],
                 deadline: float) -> None:
        self.store = store
        self.nodes = nodes
        self.deadline = deadline
        self.log: list[tuple[Path, Kind | None]] = []
        self.open = True

    async def _read(self) -> None:
        s = self.store
        s.in_flight += 1
        s.max_in_flight = max(s.max_in_flight, s.in_flight)
        try:
            await asyncio.sleep(0)
            s.now += s.cost
            if not self.open:
                raise TransactionRetry("finished")
            if s.now > self.deadline:
                raise TransactionExpired("budget")
            if s.fail and s.rng.random() < s.fail:
                raise TransactionRetry("injected")
        finally:
            s.in_flight -= 1

    async def root(self) -> Entry:
        await self._read()
        return Entry("", 0, Kind.DIR)

    async def lookup(self, parent: object, name: str) -> Entry | None:
        await self._read()
        for k, (p, n, kind) in self.nodes.items():
            if p == parent and n == name:
                return Entry(n, k, kind)
        return None

    async def list(self, parent: object, kind: Kind, after: str | None,
                   limit: int) -> Sequence[Entry]:
        await self._read()
        rows = sorted((n, k) for k, (p, n, kd) in self.nodes.items()
                      if p == parent and kd is kind and (after is None or n > after))
        return [Entry(n, k, kind) for n, k in rows[:limit]]

    async def commit(self) -> None:
        await self._read()
        self.open = False
        self.store.committed.extend(self.log)

    async def rollback(self) -> None:
        self.open = False


def recorder(check_paths: bool = True) -> Callable[[Visit], None]:
    """A visitor that writes its visit into the transaction and checks path consistency."""

    def visit(v: Visit) -> None:
        txn = v.transaction
        assert isinstance(txn, MemoryTransaction)
        if check_paths and v.node is not None:
            # Path consistency: the node is at this path in the transaction's own snapshot.
            assert find(txn.nodes, v.path) == v.node.key
            assert path_of(txn.nodes, int(v.node.key)) == v.path  # type: ignore[call-overload]
        txn.log.append((v.path, v.node.kind if v.node else None))

    return visit


# -- trees ------------------------------------------------------------------------------------

names = st.text(alphabet="abcd", min_size=1, max_size=2)
trees: st.SearchStrategy[Tree] = st.recursive(
    st.dictionaries(names, st.none(), max_size=4),
    lambda children: st.dictionaries(names, st.none() | children, max_size=4),
    max_leaves=25)


def preorder(tree: Tree, path: Path = ()) -> list[Path]:
    out = [path]
    out += [(*path, n) for n in sorted(tree) if tree[n] is None]
    for n in sorted(tree):
        sub = tree[n]
        if sub is not None:
            out += preorder(sub, (*path, n))
    return out


def depth(tree: Tree) -> int:
    subs = [depth(s) for s in tree.values() if s is not None]
    return 1 + max(subs, default=0)


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def check_relaxed(seen: list[Path], tree: Tree) -> None:
    expected = preorder(tree)
    assert sorted(seen) == sorted(expected)
    position = {p: i for i, p in enumerate(seen)}
    for p in seen[1:]:
        assert position[p[:-1]] < position[p], "a directory is visited before its contents"
    files_by_dir: dict[Path, list[str]] = {}
    dirs = {p for p in expected if p == () or _is_dir(tree, p)}
    for p in seen:
        if p not in dirs:
            files_by_dir.setdefault(p[:-1], []).append(p[-1])
    for names_ in files_by_dir.values():
        assert names_ == sorted(names_), "files of one directory are visited in order"


def _is_dir(tree: Tree, path: Path) -> bool:
    node: Tree | None = tree
    for n in path:
        assert node is not None
        node = node[n]
    return node is not None


# -- per-mode guarantees ------------------------------------------------------------------------


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees, page=st.integers(1, 4), window=st.integers(1, 6),
       budget=st.sampled_from([0.0, 4.0, 50.0]), fail=st.sampled_from([0.0, 0.05, 0.15]),
       seed=st.integers(0, 1000))
def test_strict_order_exactly_once_across_batches_and_failures(
        tree: Tree, page: int, window: int, budget: float, fail: float, seed: int) -> None:
    """Strict mode commits every path exactly once in pre-order (dir, files, subdirs by name),
    whatever the page size, read-ahead window, transaction budget and injected failures."""
    # A transaction must fit one piece of work: resolving the deepest path, a listing, commit.
    budget += 2 * depth(tree) + 4
    store = MemoryStore(tree, fail=fail, seed=seed)
    t = Traversal(store, recorder(), mode="strict", budget=budget, page_size=page,
                  window=window, clock=store.clock, retry_delay=0, max_retries=1000)
    stats = run(t.run())
    assert [p for p, _ in store.committed] == preorder(tree)
    assert stats.done and stats.visits == len(preorder(tree))  # type: ignore[attr-defined]
    # Bounded cursor: O(depth * page) entries.
    assert stats.max_cursor_size <= (depth(tree) + 1) * (page + 2)  # type: ignore[attr-defined]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees, page=st.integers(1, 4), window=st.integers(1, 6),
       mode=st.sampled_from(["relaxed", "any"]), fail=st.sampled_from([0.0, 0.1]),
       seed=st.integers(0, 1000))
def test_relaxed_and_any_visit_each_path_once(tree: Tree, page: int, window: int, mode: str,
                                              fail: float, seed: int) -> None:
    """Relaxed and any modes commit every path exactly once; a directory before its contents
    and the files of one directory in name order (what relaxed promises)."""
    store = MemoryStore(tree, fail=fail, seed=seed)
    t = Traversal(store, recorder(), mode=mode, budget=2.0 * depth(tree) + 6, page_size=page,  # type: ignore[arg-type]
                  window=window, clock=store.clock, retry_delay=0, max_retries=1000)
    stats = run(t.run())
    check_relaxed([p for p, _ in store.committed], tree)
    bound = (depth(tree) + 1) * (page + 2) + window * page
    assert stats.max_cursor_size <= bound  # type: ignore[attr-defined]


def test_relaxed_processes_reads_out_of_order() -> None:
    """In relaxed mode a directory whose listing arrives first is processed first; strict
    waits for the gap."""

    class SlowFirst(MemoryStore):
        async def begin(self, *, budget: float) -> MemoryTransaction:
            txn = await super().begin(budget=budget)
            orig = txn.list

            async def list_(parent: object, kind: Kind, after: str | None,
                            limit: int) -> Sequence[Entry]:
                if self.nodes[int(parent)][1] == "a":  # type: ignore[call-overload]
                    for _ in range(20):
                        await asyncio.sleep(0)
                return await orig(parent, kind, after, limit)

            txn.list = list_  # type: ignore[method-assign]
            return txn

    tree: Tree = {"a": {"x": None}, "b": {"y": None}}
    orders = {}
    for mode in ("strict", "relaxed"):
        store = SlowFirst(tree)
        run(Traversal(store, recorder(), mode=mode, budget=1000,  # type: ignore[arg-type]
                      clock=store.clock).run())
        orders[mode] = [p for p, _ in store.committed]
    assert orders["strict"] == preorder(tree)
    assert orders["relaxed"].index(("b",)) < orders["relaxed"].index(("a",))


@pytest.mark.parametrize("mode", ["strict", "relaxed", "any"])
def test_an_arrived_page_leads_to_its_reads_before_the_visitor_gets_there(mode: str) -> None:
    """While the first directory's listing is pending, a later directory's page that arrived
    has its follow-up reads (its next page of files, its subdirectories) issued at once, not
    when the visitor reaches it; the order per mode still holds. (Without that, the gated
    read below is never released and the traversal fails.)"""

    class Gated(MemoryStore):
        gate: asyncio.Event | None = None
        followups: list[tuple[str, Kind, str | None]]

        async def begin(self, *, budget: float) -> MemoryTransaction:
            txn = await super().begin(budget=budget)
            orig = txn.list
            if self.gate is None:
                self.gate, self.followups = asyncio.Event(), []

            async def list_(parent: object, kind: Kind, after: str | None,
                            limit: int) -> Sequence[Entry]:
                assert self.gate is not None
                name = self.nodes[int(parent)][1]  # type: ignore[call-overload]
                if name == "a" and kind is Kind.FILE and after is None:
                    await asyncio.wait_for(self.gate.wait(), timeout=5)
                elif name == "b" and (kind is Kind.DIR or after is not None):
                    self.followups.append((name, kind, after))
                    if len(self.followups) == 2:
                        self.gate.set()
                return await orig(parent, kind, after, limit)

            txn.list = list_  # type: ignore[method-assign]
            return txn

    tree: Tree = {"a": {"x": None}, "b": {"y0": None, "y1": None, "y2": None, "c": {"z": None}}}
    store = Gated(tree)
    run(Traversal(store, recorder(), mode=mode, budget=1000, page_size=2,  # type: ignore[arg-type]
                  limiter=Semaphore(8), clock=store.clock).run())
    seen = [p for p, _ in store.committed]
    if mode == "strict":
        assert seen == preorder(tree)
    else:
        check_relaxed(seen, tree)
    assert sorted(store.followups, key=str) == [("b", Kind.DIR, None), ("b", Kind.FILE, "y1")]


@pytest.mark.parametrize("window", [1, 3, 5])
def test_reads_ahead_of_the_visitor_are_bounded_by_the_window(window: int) -> None:
    """Listings read ahead (in flight, or arrived but not processed) never exceed `window`,
    follow-up reads of arrived pages included, even with permits to spare."""
    tree: Tree = {f"d{i}": {**{f"f{j}": None for j in range(5)}, "s": {"x": None}}
                  for i in range(10)}
    store = MemoryStore(tree)
    run(Traversal(store, recorder(), budget=1e9, page_size=2, window=window,
                  limiter=Semaphore(64), clock=store.clock).run())
    assert [p for p, _ in store.committed] == preorder(tree)
    assert store.max_in_flight <= window


# -- time budget, expiry, batches ---------------------------------------------------------------


def test_batches_stop_reading_before_the_budget_ends() -> None:
    """With a budget of 10 reads, transactions stop issuing reads, commit a gap-free prefix
    and resume: many commits, no expiry, no failure."""
    tree: Tree = {f"d{i}": {f"f{j}": None for j in range(5)} for i in range(8)}
    store = MemoryStore(tree)
    stats = run(Traversal(store, recorder(), budget=10.0, page_size=2, window=3,
                          clock=store.clock).run())
    assert [p for p, _ in store.committed] == preorder(tree)
    assert stats.commits > 5 and stats.expirations == 0 and stats.retries == 0  # type: ignore[attr-defined]


def test_expired_transactions_are_retried_with_a_smaller_budget() -> None:
    """A visitor slower than the engine's estimate makes transactions expire; the engine
    halves the budget it uses, retries from the cursor, and finishes with nothing skipped."""
    tree: Tree = {f"d{i}": {f"f{j}": None for j in range(6)} for i in range(6)}
    store = MemoryStore(tree)
    base = recorder()

    def slow(v: Visit) -> None:
        store.now += 3  # each visit costs 3 units of the transaction's time
        base(v)

    stats = run(Traversal(store, slow, budget=40.0, page_size=6, window=4, retry_delay=0,
                          clock=store.clock, max_retries=50).run())
    assert [p for p, _ in store.committed] == preorder(tree)
    assert stats.expirations > 0 and stats.redone_visits > 0  # type: ignore[attr-defined]


def test_max_batch_bounds_visits_per_transaction() -> None:
    """`max_batch` ends a transaction's reads once that many visits were made."""
    tree: Tree = {f"f{j}": None for j in range(30)}
    store = MemoryStore(tree)
    sizes: list[int] = []
    last = [0]

    def on_commit(s: object) -> None:
        sizes.append(s.visits - last[0])  # type: ignore[attr-defined]
        last[0] = s.visits  # type: ignore[attr-defined]

    run(Traversal(store, recorder(), page_size=4, window=2, max_batch=8, budget=1e9,
                  clock=store.clock, on_commit=on_commit).run())
    assert [p for p, _ in store.committed] == preorder(tree)
    assert max(sizes) <= 8 + 4 and len(sizes) >= 3


def test_redo_is_bounded_per_transaction() -> None:
    """Reads redone per transaction (resume lookups plus prefetched, unused listings) are
    bounded by the window and the cursor's paths; the redo ratio stays small with big budgets."""
    tree: Tree = {f"d{i}": {f"e{j}": {f"f{k}": None for k in range(3)} for j in range(4)}
                  for i in range(6)}
    store = MemoryStore(tree)
    stats = run(Traversal(store, recorder(), budget=12.0, page_size=3, window=4,
                          clock=store.clock).run())
    s = stats
    redone = s.reads - s.useful_reads  # type: ignore[attr-defined]
    per_txn = redone / s.transactions  # type: ignore[attr-defined]
    assert per_txn <= 4 + (depth(tree) + 1) * 2
    store2 = MemoryStore(tree)
    big = run(Traversal(store2, recorder(), budget=1e9, page_size=3, window=4,
                        clock=store2.clock).run())
    assert big.transactions == 1 and big.redo_ratio < 0.05  # type: ignore[attr-defined]
    assert s.redo_ratio > big.redo_ratio  # type: ignore[attr-defined]


# -- concurrency limit --------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [1, 2, 5])
def test_shared_limiter_bounds_reads_across_traversals(limit: int) -> None:
    """Three concurrent traversals sharing a Semaphore(limit) never have more than `limit`
    reads in flight at the store, and all finish."""
    tree: Tree = {f"d{i}": {f"f{j}": None for j in range(4)} for i in range(10)}
    store = MemoryStore(tree)
    sem = Semaphore(limit)

    async def main() -> None:
        ts = [Traversal(store, recorder(), mode=m, page_size=2, window=8, limiter=sem,
                        budget=1e9, clock=store.clock) for m in ("strict", "relaxed", "any")]
        await asyncio.gather(*(t.run() for t in ts))
        assert all(t.done for t in ts)

    run(main())
    assert 1 <= store.max_in_flight <= limit
    assert len(store.committed) == 3 * len(preorder(tree))


def test_a_large_traversal_does_not_starve_a_small_one() -> None:
    """With one permit shared, a small traversal started while a large one is running finishes
    after a bounded number of the large one's reads (the fair semaphore makes them take turns),
    long before the large one ends."""
    big_tree: Tree = {f"d{i:03}": {f"f{j}": None for j in range(3)} for i in range(80)}
    small_tree: Tree = {"a": None, "b": {"c": None}}
    big_store, small_store = MemoryStore(big_tree), MemoryStore(small_tree)
    sem = Semaphore(1)
    window = 8
    going = asyncio.Event()  # created inside asyncio.run's loop below (3.11 binds on use)
    record = recorder()

    def visit_big(v: Visit) -> None:
        record(v)
        if len(v.transaction.log) >= 10:  # type: ignore[attr-defined]
            going.set()

    big = Traversal(big_store, visit_big, page_size=2, window=window, limiter=sem,
                    budget=1e9, clock=big_store.clock)
    small = Traversal(small_store, recorder(), page_size=2, window=window, limiter=sem,
                      budget=1e9, clock=small_store.clock)

    async def main() -> tuple[int, int]:
        running = asyncio.ensure_future(big.run())
        await going.wait()
        before = big.statistics().reads
        await small.run()
        during = big.statistics().reads - before
        await running
        return during, small.statistics().reads

    during, small_reads = run(main())  # type: ignore[misc]
    assert small.done and big.done
    assert [p for p, _ in small_store.committed] == preorder(small_tree)
    # Each of the small traversal's operations waits behind at most the large one's queued
    # reads (its window) and the one in flight.
    assert during <= (small_reads + 2) * (window + 1)
    assert big.statistics().reads > 3 * during, "the small one was not served early"


def test_default_limiter_is_shared_and_fair() -> None:
    """Traversals without `limiter=` share one process-wide fair semaphore."""
    assert default_limiter() is default_limiter()
    tree: Tree = {f"f{j}": None for j in range(5)}
    store = MemoryStore(tree)
    stats = run(traverse(store, recorder(), window=64))
    assert stats.max_in_flight <= default_limiter().statistics().value + 64  # type: ignore[attr-defined]
    assert store.max_in_flight <= 32


# -- concurrent mutation between transactions ------------------------------------------------


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees, seed=st.integers(0, 10_000), mode=st.sampled_from(["strict", "relaxed", "any"]))
def test_mutation_between_transactions_keeps_path_consistency(tree: Tree, seed: int,
                                                              mode: str) -> None:
    """Files and directories created, deleted and moved between transactions: every visit is
    path-consistent in its own transaction, no path is committed twice, and every file that
    exists throughout at a path that never changes is visited."""
    rng = random.Random(seed)
    touched: set[Path] = set()

    def mutate(s: MemoryStore) -> None:
        paths = s.paths()
        keys = [k for k in paths if k != 0]
        op = rng.choice(["create", "delete", "move", "none"])
        if op == "create" or not keys:
            dirs = [k for k in paths if s.nodes[k][2] is Kind.DIR]
            parent = rng.choice(dirs)
            name = rng.choice("abcdz") + "n"
            if find(s.nodes, (*paths[parent], name)) is None:
                s.new(parent, name, rng.choice([Kind.FILE, Kind.DIR]))
                touched.add((*paths[parent], name))
        elif op == "delete":
            k = rng.choice(keys)
            doomed = [x for x in keys if paths[x][:len(paths[k])] == paths[k]]
            for x in doomed:
                touched.add(paths[x])
                del s.nodes[x]
        elif op == "move":
            k = rng.choice(keys)
            dirs = [d for d in paths if s.nodes[d][2] is Kind.DIR
                    and paths[d][:len(paths[k])] != paths[k]]
            parent = rng.choice(dirs)
            name = s.nodes[k][1] + "m"
            if find(s.nodes, (*paths[parent], name)) is None:
                for x in keys:
                    if paths[x][:len(paths[k])] == paths[k]:
                        touched.add(paths[x])
                s.nodes[k] = (parent, name, s.nodes[k][2])
                for x in s.paths():
                    if x in paths and s.paths()[x] != paths[x]:
                        touched.add(s.paths()[x])

    store = MemoryStore(tree, mutate=mutate)
    initial = set(preorder(tree))
    run(Traversal(store, recorder(), mode=mode, budget=2.0 * depth(tree) + 5,  # type: ignore[arg-type]
                  page_size=2,
                  window=3, clock=store.clock).run())
    committed = [p for p, _ in store.committed]
    assert len(committed) == len(set(committed)), "no path is committed twice"
    # Stable: neither the path nor any of its ancestors was created, deleted or moved.
    stable = {p for p in initial if not any(p[:i] in touched for i in range(len(p) + 1))}
    assert stable <= set(committed)


def test_strict_file_moved_later_in_order_is_visited_at_least_once() -> None:
    """Strict mode: a file that exists throughout and moves to a later place in traversal
    order between transactions is visited (here at its new path, after its old one was not)."""
    tree: Tree = {"a": {f"f{i}": None for i in range(6)}, "b": {"g": None}}
    moved = [False]

    def mutate(s: MemoryStore) -> None:
        if not moved[0] and len(s.committed) >= 3:
            key = s.find(("a", "f5"))
            b = s.find(("b",))
            assert key is not None and b is not None
            s.nodes[key] = (b, "h", Kind.FILE)
            moved[0] = True

    store = MemoryStore(tree, mutate=mutate)
    run(Traversal(store, recorder(), budget=5.0, page_size=2, window=1,
                  clock=store.clock).run())
    committed = [p for p, _ in store.committed]
    assert moved[0]
    assert ("b", "h") in committed and ("a", "f5") not in committed
    assert len(committed) == len(set(committed))


@pytest.mark.parametrize(("change", "path", "visited"), [
    ("create", ("b", "h"), True),     # created later in traversal order than the cursor
    ("create", ("a", "0"), False),    # created earlier in traversal order: behind the cursor
    ("delete", ("b", "g"), False),    # deleted before the cursor reaches it
])
def test_strict_changes_between_transactions_as_documented(change: str, path: Path,
                                                           visited: bool) -> None:
    """Strict mode, the rows of the docs' table of concurrent changes: a node created ahead of
    the cursor is visited, one created behind it is not, one deleted ahead of it is not; the
    rest of the tree is visited exactly once, in pre-order."""
    tree: Tree = {"a": {f"f{i}": None for i in range(6)}, "b": {"g": None}}
    changed = [False]

    def mutate(s: MemoryStore) -> None:
        if changed[0] or len(s.committed) < 3:  # after "/", "/a" and "/a/f0"
            return
        parent = s.find(path[:-1])
        assert parent is not None
        if change == "create":
            s.new(parent, path[-1], Kind.FILE)
        else:
            key = s.find(path)
            assert key is not None
            del s.nodes[key]
        changed[0] = True

    store = MemoryStore(tree, mutate=mutate)
    run(Traversal(store, recorder(), budget=5.0, page_size=2, window=1,
                  clock=store.clock).run())
    committed = [p for p, _ in store.committed]
    assert changed[0]
    assert (path in committed) is visited
    if visited:  # the tree as it is at the end, in pre-order
        expected = preorder({**tree, "b": {**tree["b"], path[-1]: None}})  # type: ignore[dict-item]
    else:
        expected = [p for p in preorder(tree) if p != path]
    assert committed == expected


def test_any_mode_reports_a_vanished_directory() -> None:
    """Any mode: a pending directory deleted between transactions is visited as "nothing
    there now" (node None); strict mode skips it."""
    tree: Tree = {"a": {"x": None}, "b": {"y": None}, "c": {"z": None}}
    for mode, expect_none in (("any", True), ("strict", False)):
        done = [False]

        def mutate(s: MemoryStore, done: list[bool] = done) -> None:
            key = s.find(("c",))
            if not done[0] and key is not None and len(s.committed) >= 1:
                for k in [k for k, v in s.nodes.items() if v[0] == key] + [key]:
                    del s.nodes[k]
                done[0] = True

        store = MemoryStore(tree, mutate=mutate)
        run(Traversal(store, recorder(), mode=mode, budget=5.0, page_size=3,  # type: ignore[arg-type]
                      window=1, clock=store.clock).run())
        assert done[0]
        assert (("c",), None) in store.committed if expect_none else (
            all(p != ("c",) for p, _ in store.committed))


# -- API ----------------------------------------------------------------------------------------


def test_resume_from_a_cursor_after_an_interruption() -> None:
    """A traversal stopped after some commits resumes from its `cursor` in a new Traversal and
    the two together visit every path exactly once, in order."""
    tree: Tree = {f"d{i}": {f"f{j}": None for j in range(3)} for i in range(5)}
    store = MemoryStore(tree)

    class Interrupt(Exception):
        pass

    def stop(s: object) -> None:
        if s.commits == 3:  # type: ignore[attr-defined]
            raise Interrupt

    first = Traversal(store, recorder(), budget=6.0, page_size=2, clock=store.clock,
                      on_commit=stop)
    with pytest.raises(Interrupt):
        run(first.run())
    assert not first.done and all(isinstance(c, CursorEntry) for c in first.cursor)
    second = Traversal(store, recorder(), budget=6.0, page_size=2, clock=store.clock,
                       start=first.cursor)
    run(second.run())
    assert [p for p, _ in store.committed] == preorder(tree)


def test_async_visitor_and_visitor_errors() -> None:
    """An async visitor is awaited; a visitor error rolls back and propagates unchanged."""
    store = MemoryStore({"a": None, "b": None})
    seen: list[Path] = []

    async def visit(v: Visit) -> None:
        await asyncio.sleep(0)
        seen.append(v.path)

    run(traverse(store, visit))
    assert seen == [(), ("a",), ("b",)]

    def boom(v: Visit) -> None:
        if v.path == ("b",):
            raise KeyError("boom")
        recorder()(v)

    store2 = MemoryStore({"a": None, "b": None})
    t = Traversal(store2, boom, clock=store2.clock)
    with pytest.raises(KeyError):
        run(t.run())
    assert store2.committed == [] and not t.done


def test_retries_are_bounded() -> None:
    """A store that always fails raises its last TransactionRetry after `max_retries`."""
    store = MemoryStore({"a": None}, fail=1.0)
    t = Traversal(store, recorder(), max_retries=3, retry_delay=0, clock=store.clock)
    with pytest.raises(TransactionRetry):
        run(t.run())
    assert t.statistics().retries == 3


def test_repr_statistics_and_protocols() -> None:
    """repr shows the state; statistics is frozen; the in-memory store meets the protocols."""
    store = MemoryStore({"a": None})
    t = Traversal(store, recorder(), clock=store.clock)
    assert "strict pending" in repr(t)
    stats = run(t.run())
    assert "done" in repr(t) and stats == t.statistics()
    with pytest.raises(AttributeError):
        stats.visits = 0  # type: ignore[misc]
    assert isinstance(store, Store)
    assert isinstance(run(store.begin(budget=1)), Transaction)


@pytest.mark.parametrize(("kwargs", "exc"), [
    ({"mode": "bfs"}, ValueError), ({"budget": 0}, ValueError),
    ({"budget": float("nan")}, ValueError), ({"reserve": 1.0}, ValueError),
    ({"page_size": 0}, ValueError), ({"window": True}, TypeError),
    ({"max_batch": 0}, ValueError), ({"retry_delay": -1}, ValueError),
    ({"limiter": asyncio.Semaphore(1)}, TypeError),
])
def test_bad_arguments_are_refused(kwargs: dict[str, object], exc: type[Exception]) -> None:
    """Bad arguments raise TypeError/ValueError naming the argument."""
    with pytest.raises(exc, match=next(iter(kwargs))):
        Traversal(MemoryStore({}), recorder(), **kwargs)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="visitor"):
        Traversal(MemoryStore({}), 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="store"):
        Traversal(object(), recorder())  # type: ignore[arg-type]


_DURATION_CASES = [(float("inf"), ValueError), (float("nan"), ValueError), (-1, ValueError),
                   (True, TypeError), (False, TypeError), ("1", TypeError)]


@pytest.mark.parametrize(("value", "exc"), [*_DURATION_CASES, (0, ValueError)])
def test_budget_follows_the_duration_rule(value: object, exc: type[Exception]) -> None:
    """`budget` (Traversal and traverse) is a duration > 0 (executors._validate): inf, NaN,
    negatives, zero and bools are refused naming `budget`."""
    with pytest.raises(exc, match="budget"):
        Traversal(MemoryStore({}), recorder(), budget=value)  # type: ignore[arg-type]
    with pytest.raises(exc, match="budget"):
        run(traverse(MemoryStore({}), recorder(), budget=value))  # type: ignore[arg-type]


@pytest.mark.parametrize(("value", "exc"), _DURATION_CASES)
def test_retry_delay_follows_the_duration_rule(value: object, exc: type[Exception]) -> None:
    """`retry_delay` is a duration >= 0 (executors._validate); zero is allowed (no back-off)."""
    with pytest.raises(exc, match="retry_delay"):
        Traversal(MemoryStore({}), recorder(), retry_delay=value)  # type: ignore[arg-type]
    Traversal(MemoryStore({}), recorder(), retry_delay=0)


@pytest.mark.parametrize("argument", ["page_size", "window", "max_retries", "max_batch"])
@pytest.mark.parametrize(("value", "exc"), [(True, TypeError), (1.0, TypeError),
                                            (0, ValueError), (-1, ValueError)])
def test_counts_follow_the_count_rule(argument: str, value: object,
                                      exc: type[Exception]) -> None:
    """page_size, window, max_retries and max_batch are counts >= 1 (executors._validate):
    bools and floats are TypeError, values below 1 ValueError, naming the argument."""
    with pytest.raises(exc, match=argument):
        Traversal(MemoryStore({}), recorder(), **{argument: value})  # type: ignore[arg-type]


def test_traversal_limiter_and_its_former_names() -> None:
    """The process-wide limiter is `traversal_limiter()` with `TRAVERSAL_LIMIT` permits (no
    longer named like the bridge's per-loop default_limiter); the former public names
    `default_limiter` and `DEFAULT_LIMIT` keep working and are the same objects."""
    assert executors.aio.traversal_limiter() is executors.aio.default_limiter()
    assert executors.aio.TRAVERSAL_LIMIT == executors.aio.DEFAULT_LIMIT == 32
    assert isinstance(executors.aio.traversal_limiter(), Semaphore)
