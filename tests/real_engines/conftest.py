"""Real vLLM CPU engines for the tests of this folder, started as few times as possible.

Each layout below is started on first use and kept for the session; at most
``PDROUTE_REAL_ENGINES_MAX`` engines (default 2: each takes one core and about 2.2 GB) run at
once, so asking for another layout stops the oldest first, and the tests are ordered by the
layout they use so that each starts once. A fixture that cannot start its engines errors (it
never skips): ``scripts/test-engines.sh`` runs this folder.

Fixtures: ``tiny_engine`` (one collocated tiny engine), ``collocated_pair`` (two of them, the
proxy's mixed pool), ``pd_pair`` (a tiny prefill engine and a
tiny decode engine handing KV over through ``ExampleConnector``), ``heavy_engine`` (one collocated
engine of the 1024 x 8 model), and ``fleets`` (the keeper, for layouts of one's own:
``fleets.get(name, specs)``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from localfleet import HEAVY, TINY, Engine, EngineSpec, Fleet, engines_python

HERE = Path(__file__).resolve().parent
MAX_ENGINES = int(os.environ.get("PDROUTE_REAL_ENGINES_MAX", "2"))
KV_BYTES = 128 * 2**20  # every engine's KV pool: 64k tiny tokens, 16k heavy ones

LAYOUTS: dict[str, tuple[EngineSpec, ...]] = {
    "tiny": (EngineSpec("c0", TINY, core=0, kv_cache_bytes=KV_BYTES),),
    "pair": (
        EngineSpec("c0", TINY, core=0, kv_cache_bytes=KV_BYTES),
        EngineSpec("c1", TINY, core=1, kv_cache_bytes=KV_BYTES),
    ),
    "pd": (
        EngineSpec("p0", TINY, core=0, role="prefill", kv_cache_bytes=KV_BYTES),
        EngineSpec("d0", TINY, core=1, role="decode", kv_cache_bytes=KV_BYTES),
    ),
    "heavy": (EngineSpec("h0", HEAVY, core=1, kv_cache_bytes=KV_BYTES),),
}
# Fixtures in the order their tests run (a test using none of them runs first).
LAYOUT_FIXTURES = ("tiny_engine", "collocated_pair", "pd_pair", "heavy_engine")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "stops_engine: stops its layout's engines (runs last of its layout)")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark this folder's tests ``real_engines`` and group them by the layout they use."""

    def rank(item: pytest.Item) -> tuple[int, bool]:
        names = getattr(item, "fixturenames", ())
        layout = next((i + 1 for i, f in enumerate(LAYOUT_FIXTURES) if f in names), 0)
        return layout, item.get_closest_marker("stops_engine") is not None

    mine = [item for item in items if HERE in Path(str(item.path)).parents]
    for item in mine:
        item.add_marker(pytest.mark.real_engines)
    order = {id(item): rank(item) for item in mine}
    items.sort(key=lambda item: order.get(id(item), (0, False)))


class FleetKeeper:
    """Started fleets by layout name; the oldest is stopped when another would pass the cap."""

    def __init__(self, tmp: Path, max_engines: int) -> None:
        self.tmp = tmp
        self.max_engines = max_engines
        self.python = engines_python()  # EnginesUnavailable: the whole folder errors, one line
        self.running: dict[str, Fleet] = {}
        self.starts: list[tuple[str, float]] = []  # (layout, seconds to healthy)

    def get(self, name: str, specs: Sequence[EngineSpec] | None = None) -> Fleet:
        fleet = self.running.get(name)
        if fleet is not None and all(e.is_running() for e in fleet):
            return fleet
        if fleet is not None:  # an engine died: start the layout again
            self.stop(name)
        specs = tuple(specs if specs is not None else LAYOUTS[name])
        while self.running and self.num_engines() + len(specs) > self.max_engines:
            self.stop(next(iter(self.running)))
        fleet = Fleet.start(specs, run_dir=self.tmp / f"{name}-{len(self.starts)}", python=self.python)
        self.running[name] = fleet
        self.starts.append((name, fleet.start_s))
        return fleet

    def num_engines(self) -> int:
        return sum(len(f.engines) for f in self.running.values())

    def stop(self, name: str) -> None:
        self.running.pop(name).stop()

    def stop_all(self) -> None:
        for name in list(self.running):
            self.stop(name)


@pytest.fixture(scope="session")
def fleets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetKeeper]:
    keeper = FleetKeeper(tmp_path_factory.mktemp("fleets"), MAX_ENGINES)
    try:
        yield keeper
    finally:
        keeper.stop_all()
        for name, seconds in keeper.starts:
            print(f"\nreal engines: layout {name} healthy in {seconds:.1f} s")


@pytest.fixture
def tiny_engine(fleets: FleetKeeper) -> Engine:
    return fleets.get("tiny")["c0"]


@pytest.fixture
def collocated_pair(fleets: FleetKeeper) -> Fleet:
    return fleets.get("pair")


@pytest.fixture
def pd_pair(fleets: FleetKeeper) -> Fleet:
    return fleets.get("pd")


@pytest.fixture
def heavy_engine(fleets: FleetKeeper) -> Engine:
    return fleets.get("heavy")["h0"]
