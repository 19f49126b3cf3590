"""This node in its region's fleet (docs/architecture.md section 9): its URL, the live nodes it
sees, and the owner of a packet, ``node_of(order id, live nodes)`` (jump consistent hash over
the live nodes' URLs, sorted: Lamping and Veach, "A Fast, Minimal Memory, Consistent Hash
Algorithm", 2014), so every node of the region sends a packet's requests to the same node.

Every worker of the node beats once a second: its node's URL alive for ``fleet_node_ttl_s``,
and the live set read back in the same round trip. While the registry does not answer, the
last set seen stays in force (ownership does not move during a Redis blip). A node that does not
answer a forward is skipped by this worker for a TTL, so its packets go to their next owner
at once; the database's row lock keeps every open single while ownership moves.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time

from hongbao.core.breaker import BreakerOpen
from hongbao.core.ports import NodeRegistry
from hongbao.server.config import Settings
from hongbao_native import node_of

log = logging.getLogger("hongbao.fleet")
BEAT_S = 1.0
_ANY_HOST = ("", "0.0.0.0", "::")


def node_url(settings: Settings) -> str:
    """The URL the other nodes reach this node at: ``fleet_node_url``, else ``http://{host}:{port}``
    as it listens (the host name when it listens on every address)."""
    if settings.fleet_node_url:
        return settings.fleet_node_url.rstrip("/")
    host = socket.gethostname() if settings.host in _ANY_HOST else settings.host
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{settings.port}"


class Skips:
    """Node URLs that did not answer a relay, each passed over for ``ttl_s`` seconds from its
    last failure; ``what`` (a %-format of the URL) is logged once a while per URL."""

    __slots__ = ("_ttl_s", "_what", "_until")

    def __init__(self, ttl_s: float, what: str) -> None:
        self._ttl_s, self._what = ttl_s, what
        self._until: dict[str, float] = {}  # URL -> monotonic time it is passed over until

    def add(self, url: str) -> None:
        """``url`` did not answer: pass over it for ``ttl_s`` seconds from now."""
        now = time.monotonic()
        if not self.holds(url, now):
            log.warning(self._what, url)
        self._until[url] = now + self._ttl_s

    def holds(self, url: str, now: float) -> bool:
        """Whether ``url`` is passed over at ``now`` (time.monotonic())."""
        return self._until.get(url, 0.0) > now


class Fleet:
    """The live nodes of this node's region as this worker sees them; ``url``: this node's."""

    __slots__ = ("url", "_registry", "_ttl_ms", "_seen", "_skips", "_live")

    def __init__(self, url: str, registry: NodeRegistry, ttl_s: float) -> None:
        self.url, self._registry, self._ttl_ms = url, registry, int(ttl_s * 1000)
        self._seen: list[str] = []  # the registry's last answer, sorted
        self._skips = Skips(ttl_s, "node %s did not answer a relay: its packets go to the next owner")
        self._live: tuple[str, ...] = ()  # _seen without the skipped nodes

    @property
    def live(self) -> tuple[str, ...]:
        """The live nodes' URLs, sorted, without those skipped; empty before the first beat."""
        return self._live

    def owner(self, order_id: str) -> str | None:
        """The URL of the node that owns packet ``order_id``, or None when it is this node (or this
        node knows no other live node: everything is local)."""
        live = self._live
        if len(live) < 2:
            return None
        url = live[node_of(order_id, len(live))]
        return None if url == self.url else url

    def skip(self, url: str) -> None:
        """``url`` did not answer a relay: pass over it for a TTL (logged once a TTL)."""
        self._skips.add(url)
        self._settle()

    async def beat(self) -> None:
        """Beat once and take the live set the registry answers (kept as it was when it does not)."""
        try:
            seen = await self._registry.beat(self.url, self._ttl_ms, int(time.time() * 1000))
        except BreakerOpen:  # Redis down: its breaker logged that once
            seen = self._seen
        except Exception as exc:
            log.warning("fleet beat failed: %s", exc)
            seen = self._seen
        if seen != self._seen:
            log.info("fleet of %s: live nodes %s", self.url, ", ".join(seen) or "none")
        self._seen = seen
        self._settle()

    async def beat_forever(self) -> None:
        """``beat`` every BEAT_S until cancelled."""
        while True:
            await self.beat()
            await asyncio.sleep(BEAT_S)

    async def leave(self) -> None:
        """Leave the live set now (a graceful stop); never raises."""
        self._seen, self._live = [], ()
        try:
            await self._registry.leave(self.url)
        except Exception as exc:
            log.warning("fleet: could not leave the live set (%s); it lapses in its TTL", exc)

    def _settle(self) -> None:
        now = time.monotonic()
        self._live = tuple(url for url in self._seen if not self._skips.holds(url, now))


class RegionEntries:
    """Each region's entries (``region_entry_urls``: north's, then south's, each a comma-separated
    list of node URLs) as this worker tries them: in their order, those that did not answer a
    relay in the last ``ttl_s`` seconds last."""

    __slots__ = ("_urls", "_skips")

    def __init__(self, settings: Settings) -> None:
        self._urls = tuple(
            tuple(url.strip().rstrip("/") for url in urls.split(",")) for urls in settings.region_entry_urls
        )
        self._skips = Skips(settings.fleet_node_ttl_s, "region entry %s did not answer a relay: tried last for a while")

    def __bool__(self) -> bool:
        """Whether this node is in a fleet of regions."""
        return bool(self._urls)

    def order(self, region: int) -> list[str]:
        """Region ``region``'s entries (1 north, 2 south) in the order to try them."""
        now = time.monotonic()
        return sorted(self._urls[region - 1], key=lambda url: self._skips.holds(url, now))

    def skip(self, url: str) -> None:
        """``url`` did not answer a relay: try it last for a while (logged once a while)."""
        self._skips.add(url)
