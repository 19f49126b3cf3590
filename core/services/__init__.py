"""The services: the only way from a route, a background job or a tool to the ports. Each is a
small class over the ports it needs (docs/architecture.md, the layers):

- ``sending`` (send, pay, cancel), ``grabbing`` (the grab filter and its caches), ``opening``
  (open and its batches), ``crediting`` (the crediting mode and the credit itself),
  ``settlement`` (the credit queue, refunds, the reconciler), ``lists`` (the user lists from
  their queue, and their repair), ``reading`` (details and lists), ``accounts`` (balances,
  top-ups, the bill), ``groups`` (the group rules), ``profiles`` (nicknames, avatars and
  greetings, with their defaults), ``pressure`` (the lists' pressure switch) and ``traffic``
  (the region new packets go to);
- ``audience`` (who may see a packet) and ``outbox`` (events, queue messages and cache
  invalidations after a write; its ``notifier`` is the push hub in a server) are shared by them.

``Services.build`` wires them over one backend's ports; the composition root
(hongbao.server.composition) picks the ports.
"""

from __future__ import annotations

from dataclasses import dataclass

import hongbao_native
from hongbao.core.faults import NO_FAULTS, Faults
from hongbao.core.grab_state import SharedGrabState
from hongbao.core.ports import Draw, ListScans, Ports
from hongbao.core.rules import Limits
from hongbao.core.services.accounts import Accounts
from hongbao.core.services.audience import Audience
from hongbao.core.services.crediting import Crediting, CreditingMode
from hongbao.core.services.grabbing import GrabFilter
from hongbao.core.services.groups import Groups
from hongbao.core.services.lists import ListKeeper
from hongbao.core.services.opening import Opening
from hongbao.core.services.outbox import Outbox
from hongbao.core.services.pressure import ListsPressure
from hongbao.core.services.profiles import Profiles
from hongbao.core.services.reading import Reading
from hongbao.core.services.sending import Sending
from hongbao.core.services.settlement import Settlement
from hongbao.core.services.traffic import TrafficSwitch
from hongbao.core.view_cache import ViewCache


@dataclass(frozen=True, slots=True)
class Services:
    """One worker's services over ``ports`` (see the module's docstring) under ``limits``."""

    ports: Ports
    limits: Limits
    outbox: Outbox
    audience: Audience
    sending: Sending
    grabbing: GrabFilter
    crediting: Crediting
    opening: Opening
    lists: ListKeeper
    settlement: Settlement
    reading: Reading
    accounts: Accounts
    groups: Groups
    profiles: Profiles
    pressure: ListsPressure
    traffic: TrafficSwitch

    @staticmethod
    def build(
        ports: Ports,
        limits: Limits,
        admission: hongbao_native.AdmissionTable,
        *,
        max_in_db: int = 2,
        draw: Draw = hongbao_native.split_lucky,
        region: int = 1,
        crediting_mode: CreditingMode = CreditingMode.REALTIME_LARGE,
        realtime_threshold_fen: int = 2000,
        grab_state: SharedGrabState | None = None,
        views: ViewCache | None = None,
        list_scans: ListScans | None = None,
        faults: Faults = NO_FAULTS,
    ) -> Services:
        """The services over ``ports``: ``admission``, the host's shared admission table, and
        ``max_in_db``, the open transactions per packet allowed in the database at once (K);
        ``draw``, a lucky share (native split_lucky by default); ``region``, 1 (north) or 2
        (south); ``crediting_mode`` and ``realtime_threshold_fen``, when a share reaches its
        receiver; ``grab_state``, the grab filter's shared level (None: memory, then the
        database); ``views``, the read caches of details and lists (None: every read from the
        database); ``list_scans``, what the reconciler reads to repair the lists (None: the
        lists queue cannot be lost); ``faults``, the crash points armed (tests)."""
        outbox = Outbox(ports.queue, views, ports.profiles)
        audience = Audience(ports.packets, ports.preorders, ports.groups, ports.clock, grab_state)
        sending = Sending(ports, limits, outbox, grab_state, region=region, faults=faults)
        grabbing = GrabFilter(audience, ports.groups, ports.packets, ports.clock, grab_state)
        crediting = Crediting(
            ports.ledger,
            ports.packets,
            ports.flags,
            ports.clock,
            outbox,
            mode=crediting_mode,
            realtime_threshold_fen=realtime_threshold_fen,
        )
        opening = Opening(
            ports.packets,
            ports.expiries,
            ports.clock,
            audience,
            grabbing,
            crediting,
            outbox,
            admission,
            max_in_db=max_in_db,
            draw=draw,
            faults=faults,
        )
        lists = ListKeeper(
            ports.lists, ports.packets, ports.queue, ports.flags, ports.clock, limits, outbox, list_scans, region
        )
        profiles, pressure = Profiles(ports.profiles, ports.clock), ListsPressure(ports.flags)
        return Services(
            ports,
            limits,
            outbox,
            audience,
            sending,
            grabbing,
            crediting,
            opening,
            lists,
            Settlement(ports, limits, crediting, sending, lists, outbox, grab_state),
            Reading(audience, ports.packets, ports.lists, profiles, ports.groups, ports.clock, views, pressure),
            Accounts(ports.ledger, ports.clock, pressure),
            Groups(ports.groups, limits, ports.clock),
            profiles,
            pressure,
            TrafficSwitch(ports.flags),
        )
