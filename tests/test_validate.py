"""Tests for executors._validate: the one rule for seconds, timeouts and counts."""

from __future__ import annotations

import math

import pytest

from executors import _validate


@pytest.mark.parametrize("value", [0, 0.0, 1, 2.5, 1e9])
def test_a_duration_is_a_finite_number_at_or_above_zero(value: float) -> None:
    """Finite non-negative ints and floats pass and come back as floats."""
    result = _validate.seconds(value, "interval")
    assert result == value and type(result) is float


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, -0.5])
def test_a_duration_out_of_range_is_a_value_error_naming_the_argument(value: float) -> None:
    """Infinity, NaN and negatives are refused for durations, the argument named as given."""
    with pytest.raises(ValueError, match="--grace"):
        _validate.seconds(value, "--grace")


@pytest.mark.parametrize("value", [True, "1", None, [1]])
def test_a_duration_of_the_wrong_kind_is_a_type_error(value: object) -> None:
    """A bool is not a number of seconds, nor a string or None."""
    with pytest.raises(TypeError, match="interval must be a number of seconds"):
        _validate.seconds(value, "interval")


def test_zero_is_refused_where_it_has_no_meaning() -> None:
    """allow_zero=False makes 0 an error and keeps small positive values."""
    with pytest.raises(ValueError, match="> 0"):
        _validate.seconds(0, "interval", allow_zero=False)
    assert _validate.seconds(1e-9, "interval", allow_zero=False) == 1e-9


def test_a_timeout_of_none_or_infinity_means_no_limit() -> None:
    """None waits forever, and math.inf means exactly the same."""
    assert _validate.timeout(None) is None
    assert _validate.timeout(math.inf) is None
    assert _validate.timeout(0) == 0.0
    assert _validate.timeout(3) == 3.0


@pytest.mark.parametrize("value", [-1, -math.inf, math.nan])
def test_a_negative_or_nan_timeout_is_a_value_error(value: float) -> None:
    """threading's -1 convention is not carried over; NaN is never a timeout."""
    with pytest.raises(ValueError, match="timeout must be >= 0 seconds or None"):
        _validate.timeout(value)


def test_a_timeout_of_the_wrong_kind_is_a_type_error_naming_it() -> None:
    """A bool or a string timeout is a TypeError naming the argument."""
    with pytest.raises(TypeError, match="wait_for must be a number of seconds or None"):
        _validate.timeout(True, "wait_for")
    with pytest.raises(TypeError):
        _validate.timeout("5")


def test_a_count_is_an_int_at_or_above_its_minimum() -> None:
    """Counts refuse bools, floats and values under the minimum."""
    assert _validate.count(3, "workers") == 3
    assert _validate.count(0, "retries", minimum=0) == 0
    with pytest.raises(ValueError, match="workers must be >= 1, got 0"):
        _validate.count(0, "workers")
    for bad in (True, 2.0, "2"):
        with pytest.raises(TypeError, match="workers must be an int"):
            _validate.count(bad, "workers")
