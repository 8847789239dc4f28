"""``put_recent``: newest last, the oldest dropped beyond the limit, a re-put moves to newest."""

from __future__ import annotations

from collections import OrderedDict

from app.learners.recent import put_recent


def test_the_oldest_go_first_and_a_reput_is_newest() -> None:
    recent: OrderedDict[str, int] = OrderedDict()
    for i, key in enumerate("abc"):
        put_recent(recent, key, i, limit=3)
    put_recent(recent, "a", 9, limit=3)  # a is now the newest
    put_recent(recent, "d", 3, limit=3)  # b, the oldest, goes
    assert list(recent.items()) == [("c", 2), ("a", 9), ("d", 3)]
