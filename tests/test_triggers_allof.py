"""`AllOf`'s search is bounded: `max_rounds` past `AllOf.MAX_ROUNDS` is refused in code and in
data, and a search inside a time budget (the store loop's plans) stops when it is spent."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from executors import AllOf, Cron, Interval, _search_budget, trigger_from_data

UTC = dt.UTC


def _never() -> AllOf:
    """Midnight against half past midnight: no round ever agrees."""
    return AllOf(Cron("0 0 * * *", tz="UTC"), Cron("30 0 * * *", tz="UTC"),
                 max_rounds=AllOf.MAX_ROUNDS)


def test_max_rounds_past_the_bound_is_refused_in_code_and_in_data() -> None:
    """AllOf(max_rounds=MAX_ROUNDS) is accepted, one more is a ValueError naming
    max_rounds and the bound; the same from data (a store's record), where a huge value held
    a store's lock for seconds."""
    assert _never().max_rounds == AllOf.MAX_ROUNDS == 10_000
    with pytest.raises(ValueError, match="max_rounds must be at most 10,000, got 10,001"):
        AllOf(Interval(60), Interval(90), max_rounds=AllOf.MAX_ROUNDS + 1)
    data = AllOf(Interval(60), Interval(90)).to_data()
    data["max_rounds"] = 10**12
    with pytest.raises(ValueError, match="max_rounds must be at most 10,000, got "
                                         "1,000,000,000,000"):
        trigger_from_data(data)
    data["max_rounds"] = AllOf.MAX_ROUNDS
    assert trigger_from_data(data) == AllOf(Interval(60), Interval(90),
                                            max_rounds=AllOf.MAX_ROUNDS)


def test_a_search_stops_when_its_time_budget_is_spent_and_only_inside_one() -> None:
    """Inside ``budget(seconds)`` an AllOf search that has not agreed when the budget is
    spent raises SearchTimeout (a TimeoutError) within a few rounds of it; nested budgets
    keep the earlier deadline; outside any budget the same search runs all its rounds and
    gives up with None, as before."""
    start = dt.datetime(2025, 1, 1, tzinfo=UTC)
    began = time.monotonic()
    with pytest.raises(_search_budget.SearchTimeout, match=r"budget of 0\.01 s"), \
            _search_budget.budget(0.01):
        _never().next_after(start)
    assert time.monotonic() - began < 0.5
    with pytest.raises(TimeoutError), _search_budget.budget(0.01), \
            _search_budget.budget(60):
        _never().next_after(start)
    assert AllOf(Cron("0 0 * * *", tz="UTC"), Cron("30 0 * * *", tz="UTC"),
                 max_rounds=50).next_after(start) is None
    with _search_budget.budget(60):  # agreement is found well within a budget
        assert AllOf(Interval(60, start=start), Interval(90, start=start)).next_after(
            start) == start + dt.timedelta(minutes=3)
