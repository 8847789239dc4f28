"""Blocks of a vectorised evaluation on several cores: a small thread pool, made on first use.

numpy's ufuncs release the GIL while they loop, so threads that evaluate different blocks of
requests run on different cores, for as long as each loop lasts. Between two calls a thread
must take the GIL back, and a thread that waited for it sleeps until woken: on the 2-core
development VM a wake-up costs tens of microseconds (two threads passing a token back and
forth: ~80 us a round). Calls much shorter than that (blocks of 8,192 requests: a few
microseconds each) leave one thread running and the other asleep; blocks of 65,536 make most
calls longer than a wake-up. Callers therefore use threads only for inputs of two large
blocks (``queue_aware_block.PARALLEL_MIN_REQUESTS``), and a call stays on its own thread
below that: no pool, no thread, no allocation of its own.

``run_blocks`` hands the block starts out from one shared iterator, one at a time, to the
calling thread and to ``num_threads - 1`` pool threads: each block is evaluated once, by the
same function on the same bounds whichever thread takes it, so the answers do not depend on
the number of threads (a test compares 1, 2 and 3 bit for bit). The calling thread works
too and needs no pool thread to finish: a pool task still queued when the blocks run out is
cancelled, so a pool busy with other calls, or a forked child (whose pool is dropped), never
stalls a call. Each task runs in a copy of the caller's context (numpy's ``errstate`` is a
context variable), and a task's exception reaches the caller.

The pool is created by the first call that needs it, never at import, with
``max_threads() - 1`` threads (at most ``MAX_THREADS - 1``), and lives for the process.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

MAX_THREADS = 4  # beyond this the calls' GIL hand-offs eat the gain

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def max_threads() -> int:
    """The cores this process may run on (its CPU affinity), at most ``MAX_THREADS``."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this platform
        cores = os.cpu_count() or 1
    return max(1, min(MAX_THREADS, cores))


def _get_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=MAX_THREADS - 1, thread_name_prefix="pdroute-blocks")
        return _pool


def _forget_pool() -> None:
    """In a forked child: the parent's pool threads do not exist here."""
    global _pool, _pool_lock
    _pool = None
    _pool_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def run_blocks(starts: range, work: Callable[[Iterator[int]], None], num_threads: int) -> None:
    """Call ``work(shared)`` on the calling thread and on ``num_threads - 1`` pool threads, where
    ``shared`` iterates over ``starts`` once for all of them (each start goes to one thread).

    ``work`` takes starts until none is left; it must keep its own scratch (threads share
    nothing else) and write only what its starts own. With ``num_threads <= 1`` this is
    ``work(iter(starts))``: no pool is made.
    """
    shared = iter(starts)
    helpers = min(num_threads, len(starts)) - 1
    if helpers <= 0:
        work(shared)
        return
    pool = _get_pool()
    tasks: list[Future[None]] = [
        pool.submit(contextvars.copy_context().run, work, shared) for _ in range(helpers)
    ]
    try:
        work(shared)
    finally:
        # A task not started by now finds no block left: cancel it rather than wait for a thread.
        running = [task for task in tasks if not task.cancel()]
        for task in running:
            task.exception()  # wait, whatever happens on this thread
    for task in running:
        task.result()  # a helper's exception, raised here
