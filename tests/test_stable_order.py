"""``redist.groups.stable_order`` (16-bit radix passes) and ``redist.groups.run_starts`` (one
pass over run boundaries) replace ``np.argsort(kind="stable")`` and ``np.searchsorted(a, a)`` in
the routing: they must give exactly the same arrays, since the routing's row order fixes which
device sends which cell (the plans)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from redist.exchange.rows import first_need_order
from redist.groups import run_starts, stable_order

_bounds = st.sampled_from([1, 3, 1 << 16, (1 << 16) + 5, 1 << 20, 1 << 32, 1 << 40])


@given(st.data(), _bounds, st.integers(-3, 0))
def test_stable_order_is_the_stable_argsort(data: st.DataObject, top: int, low: int) -> None:
    n = data.draw(st.integers(0, 300))
    key = np.array(data.draw(st.lists(st.integers(low, top - 1), min_size=n, max_size=n)), dtype=np.int64)
    if n and data.draw(st.booleans()):  # many ties, the case stability decides
        key = key % max(1, data.draw(st.integers(1, 5))) * (top // 5 or 1)
    assert np.array_equal(stable_order(key), np.argsort(key, kind="stable"))


def test_stable_order_across_both_digits() -> None:
    """Keys that tie on the low 16 bits and differ on the high ones, and the reverse."""
    key = np.array([(3 << 16) + 1, (1 << 16) + 1, 1, (1 << 16) + 2, (3 << 16), 2, (1 << 16) + 1], dtype=np.int64)
    assert np.array_equal(stable_order(key), np.argsort(key, kind="stable"))
    assert np.array_equal(stable_order(np.zeros(0, dtype=np.int64)), np.zeros(0, dtype=np.intp))


@given(st.lists(st.integers(0, 6), max_size=200))
def test_run_starts_is_searchsorted_on_itself(values: list[int]) -> None:
    a = np.sort(np.array(values, dtype=np.int64))
    assert np.array_equal(run_starts(a), np.searchsorted(a, a))


def _first_need_order_by_sort(key: np.ndarray, n_keys: int) -> np.ndarray:
    """The sort it replaced: distinct keys ranked by their first row."""
    first = np.full(n_keys, -1, dtype=np.int64)
    first[key[::-1]] = np.arange(len(key) - 1, -1, -1)
    present = np.flatnonzero(first >= 0)
    rank = np.empty(n_keys, dtype=np.int64)
    rank[present[np.argsort(first[present], kind="stable")]] = np.arange(len(present))
    return rank[key]


@given(st.integers(1, 40).flatmap(lambda n: st.tuples(st.just(n), st.lists(st.integers(0, n - 1), max_size=200))))
def test_first_need_order_ranks_keys_by_first_row(case: tuple[int, list[int]]) -> None:
    n_keys, values = case
    key = np.array(values, dtype=np.int64)
    assert np.array_equal(first_need_order(key, n_keys), _first_need_order_by_sort(key, n_keys))
