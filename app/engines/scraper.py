"""The engine scraper: fetches every endpoint's /metrics in rounds and publishes a snapshot.

``EngineScraper.run`` (started in the app's lifespan when ``PDROUTE_ENGINES_FILE`` is set) scrapes
all endpoints with at most ``concurrency`` requests in flight and a per-target timeout, parses
them (``app.engines.kinds``, pure), then replaces ``snapshot`` with a new ``FleetSnapshot``.
The request path only reads ``scraper.snapshot`` (one attribute read of an immutable object: no
lock, no await). A failed scrape keeps the endpoint's previous reading, which ages out through
the staleness limit. Rounds start every ``interval_s`` (times 1 +/- ``jitter``, so that many
pdroute replicas do not scrape in step), or when the previous round ends if it ran longer.

The engines file is polled like the params file: a new version is loaded once two polls see
it; a bad one is logged once, counted, and the previous fleet stays.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp.http_exceptions import HttpProcessingError
from prometheus_client import CollectorRegistry

from app.engines.autofill import FleetSnapshot, Reading, with_rate
from app.engines.config import Endpoint, Fleet, InvalidEngines, load_fleet
from app.engines.kinds import read_exposition
from app.engines.metrics import ScrapeMetrics
from app.engines.sample import EngineSample, ExpositionError, NoMetrics
from app.params_store import FileSignature
from app.settings import Settings

log = logging.getLogger("pdroute.engines")
MAX_EXPOSITION_BYTES = 8 * 1024 * 1024  # a vLLM pod's /metrics is ~100 kB
_CHUNK_BYTES = 1 << 16
_ACCEPT = {"accept": "text/plain"}
_NOTHING = object()


@dataclass(frozen=True)
class ScrapeSettings:
    interval_s: float = 0.25
    timeout_s: float = 0.5  # per target: connect, read and the whole body
    jitter: float = 0.1  # fraction of the interval, each way
    concurrency: int = 32
    stale_s: float = 2.0
    watch_interval_s: float = 2.0  # how often the engines file is checked for a new version


def session(settings: ScrapeSettings) -> aiohttp.ClientSession:
    """The scraper's connections (opened by ``run`` on the running loop; tests open their own).

    aiohttp rather than httpx: a scrape costs about 0.13 ms of the event loop's CPU against
    0.58 ms, and a request that arrives during a scrape waits for it (docs/proxy.md, "Overhead").
    """
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=settings.concurrency, limit_per_host=0),
        timeout=aiohttp.ClientTimeout(total=settings.timeout_s),
        skip_auto_headers=("User-Agent",),
    )


class ScrapeFailure(Exception):
    """One scrape failed; ``reason`` is a bounded metric label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class EngineScraper:
    """Holds the fleet and its latest snapshot; ``run`` keeps it fresh until cancelled."""

    def __init__(
        self,
        path: Path,
        settings: ScrapeSettings,
        metrics: ScrapeMetrics,
        monotonic: Callable[[], float],
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.path = path
        self.settings = settings
        self.metrics = metrics
        self.monotonic = monotonic
        self.rng = rng if rng is not None else random.Random()
        self.signature = FileSignature.of(path)
        self.snapshot = FleetSnapshot(load_fleet(path), {})  # InvalidEngines: the service does not start
        self.last_error: str | None = None
        self._failing: dict[str, str] = {}  # endpoint id -> the last failure logged
        metrics.watch(lambda: self.snapshot, monotonic, settings.stale_s)

    @property
    def fleet(self) -> Fleet:
        return self.snapshot.fleet

    async def run(self) -> None:
        """Scrape rounds until cancelled; never raises (an unexpected error is logged)."""
        log.info(
            "scraping %d engine endpoints from %s every %g s (readings stale after %g s)",
            len(self.fleet.endpoints),
            self.path,
            self.settings.interval_s,
            self.settings.stale_s,
        )
        async with session(self.settings) as client:
            settling: object = _NOTHING
            next_watch = self.monotonic() + self.settings.watch_interval_s
            while True:
                started = self.monotonic()
                try:
                    await self.scrape_round(client)
                    if started >= next_watch:
                        next_watch = started + self.settings.watch_interval_s
                        settling = self._watch_file(settling)
                except Exception:
                    log.exception("engine scrape round failed unexpectedly; scraping goes on")
                spread = self.settings.jitter * (2.0 * self.rng.random() - 1.0)
                delay = self.settings.interval_s * (1.0 + spread) - (self.monotonic() - started)
                await asyncio.sleep(max(delay, 0.0))

    async def scrape_round(self, client: aiohttp.ClientSession) -> None:
        """Scrape every endpoint once and publish the merged snapshot."""
        fleet = self.snapshot.fleet
        gate = asyncio.Semaphore(self.settings.concurrency)
        endpoints = list(fleet.endpoints.values())
        results = await asyncio.gather(*(self._scrape_one(client, e, gate) for e in endpoints))
        current = self.snapshot
        if current.fleet is not fleet:  # reloaded meanwhile: this round's results are for the old fleet
            return
        readings = dict(current.readings)
        for endpoint, reading in zip(endpoints, results, strict=True):
            if reading is not None:  # its prefill rate against the reading it replaces, once here
                readings[endpoint.id] = with_rate(reading, readings.get(endpoint.id), self.settings.stale_s)
        self.snapshot = FleetSnapshot(fleet, readings)

    async def _scrape_one(
        self, client: aiohttp.ClientSession, endpoint: Endpoint, gate: asyncio.Semaphore
    ) -> Reading | None:
        async with gate:
            started = self.monotonic()
            try:
                sample = await asyncio.wait_for(self._fetch(client, endpoint), self.settings.timeout_s)
            except TimeoutError:  # aiohttp's own timeouts are TimeoutErrors too
                self._failed(endpoint, "timeout", f"no answer within {self.settings.timeout_s:g} s")
                return None
            except ScrapeFailure as exc:
                self._failed(endpoint, exc.reason, str(exc))
                return None
            except (aiohttp.ClientError, HttpProcessingError) as exc:
                self._failed(endpoint, "connect", f"{type(exc).__name__}: {exc}")
                return None
            except Exception as exc:  # a surprise must not stop the other endpoints' scrapes
                log.exception("engine %s: unexpected scrape error", endpoint.id)
                self._failed(endpoint, "other", f"{type(exc).__name__}: {exc}")
                return None
            finally:
                self.metrics.duration.labels(kind=endpoint.kind).observe(self.monotonic() - started)
        taken_at = self.monotonic()
        if sample.problems:
            self._failed(endpoint, "bad_value", "refused " + "; ".join(sample.problems[:3]))
        elif endpoint.id in self._failing:
            log.info("engine %s (%s): scraping again", endpoint.id, endpoint.url)
            del self._failing[endpoint.id]
        return Reading(sample, taken_at)

    async def _fetch(self, client: aiohttp.ClientSession, endpoint: Endpoint) -> EngineSample:
        async with client.get(endpoint.url, headers=_ACCEPT, allow_redirects=False) as response:
            if response.status != 200:
                raise ScrapeFailure("http_status", f"HTTP {response.status}")
            chunks = []
            size = 0
            async for chunk in response.content.iter_chunked(_CHUNK_BYTES):
                size += len(chunk)
                if size > MAX_EXPOSITION_BYTES:
                    raise ScrapeFailure("too_large", f"body over {MAX_EXPOSITION_BYTES} bytes")
                chunks.append(chunk)
        try:
            return read_exposition(b"".join(chunks).decode("utf-8"), endpoint)
        except (ExpositionError, UnicodeDecodeError) as exc:
            raise ScrapeFailure("parse", str(exc).splitlines()[0] if str(exc) else "parse error") from None
        except NoMetrics as exc:
            raise ScrapeFailure("no_metrics", str(exc)) from None

    def _failed(self, endpoint: Endpoint, reason: str, message: str) -> None:
        self.metrics.errors.labels(target=endpoint.id, kind=endpoint.kind, reason=reason).inc()
        if self._failing.get(endpoint.id) != reason:  # one log line per change, not per scrape
            self._failing[endpoint.id] = reason
            log.warning("engine %s (%s): scrape failed (%s): %s", endpoint.id, endpoint.url, reason, message)

    def _watch_file(self, settling: object) -> object:
        """One poll of the engines file; returns the version now settling (see ``reload``)."""
        now = FileSignature.of(self.path)
        if now == self.signature:
            return _NOTHING
        if now != settling:
            return now
        self.reload()
        return _NOTHING

    def reload(self) -> Fleet | None:
        """Load the file again; on success swap the fleet (keeping readings of unchanged
        endpoints), on failure log one line, count it and keep the old fleet. Returns the new fleet."""
        self.signature = FileSignature.of(self.path)
        try:
            fleet = load_fleet(self.path)
        except InvalidEngines as exc:
            self.last_error = str(exc)
            self.metrics.reloads.labels(outcome="failure").inc()
            log.error("engines reload refused, still scraping the previous fleet: %s", exc)
            return None
        old = self.snapshot
        kept = {
            i: r
            for i, r in old.readings.items()
            if i in fleet.endpoints and fleet.endpoints[i] == old.fleet.endpoints.get(i)
        }
        self.snapshot = FleetSnapshot(fleet, kept)
        self.last_error = None
        self._failing = {i: r for i, r in self._failing.items() if i in fleet.endpoints}
        self.metrics.reloads.labels(outcome="success").inc()
        log.info("engines reloaded from %s: %d endpoints", self.path, len(fleet.endpoints))
        return fleet


def build_scraper(
    settings: Settings, registry: CollectorRegistry, monotonic: Callable[[], float]
) -> EngineScraper | None:
    """The scraper of ``settings.engines_file`` (``InvalidEngines`` if bad); None when unset."""
    if settings.engines_file is None:
        return None
    scrape = ScrapeSettings(
        interval_s=settings.scrape_interval_s,
        timeout_s=settings.scrape_timeout_s,
        jitter=settings.scrape_jitter,
        concurrency=settings.scrape_concurrency,
        stale_s=settings.engines_stale_s,
        watch_interval_s=settings.watch_interval_s,
    )
    return EngineScraper(settings.engines_file, scrape, ScrapeMetrics(registry), monotonic)
