"""run_blocks: every start to one thread, helpers' errors to the caller, no pool when alone."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from pdroute_core.routing import block_pool


def test_each_start_goes_to_exactly_one_thread() -> None:
    taken: list[tuple[int, str]] = []
    helper_started = threading.Event()

    def work(starts: Iterator[int]) -> None:
        if threading.current_thread() is threading.main_thread():
            helper_started.wait(timeout=5)  # let a helper take some (it may not: that is allowed)
        else:
            helper_started.set()
        for start in starts:
            taken.append((start, threading.current_thread().name))

    block_pool.run_blocks(range(0, 1000, 10), work, num_threads=2)
    assert sorted(start for start, _ in taken) == list(range(0, 1000, 10))


def test_a_helpers_error_reaches_the_caller() -> None:
    helper_failed = threading.Event()

    def work(starts: Iterator[int]) -> None:
        if threading.current_thread() is threading.main_thread():
            helper_failed.wait(timeout=5)
            for _ in starts:
                pass
        else:
            helper_failed.set()
            raise RuntimeError("block failed")

    with pytest.raises(RuntimeError, match="block failed"):
        block_pool.run_blocks(range(0, 100, 10), work, num_threads=2)


def test_one_thread_or_one_block_needs_no_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> None:
        raise AssertionError("a thread pool was asked for")

    monkeypatch.setattr(block_pool, "_get_pool", refuse)
    seen: list[int] = []

    def work(starts: Iterator[int]) -> None:
        seen.extend(starts)

    block_pool.run_blocks(range(0, 50, 10), work, num_threads=1)
    block_pool.run_blocks(range(0, 5, 10), work, num_threads=4)
    assert seen == [0, 10, 20, 30, 40, 0]


def test_max_threads_is_bounded() -> None:
    assert 1 <= block_pool.max_threads() <= block_pool.MAX_THREADS
