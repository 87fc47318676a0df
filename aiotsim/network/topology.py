"""Topology: the builders of whole networks over a :class:`~aiotsim.network.graph.Graph`.

A :class:`Topology` is a :class:`~aiotsim.network.graph.Graph` (vertices with roles, shared
:class:`~aiotsim.network.link.Link` s, cached routes, :meth:`~aiotsim.network.graph.Graph.validate`)
with the builders of the networks a scenario names: :meth:`Topology.star`,
:meth:`Topology.hierarchical`, :meth:`Topology.ring`, :meth:`Topology.shared_medium` and
:meth:`Topology.from_links` (custom graphs from a scenario file).

Every builder takes ``queue_packets``, the drop-tail buffer of every link it makes (packets of the
link's MTU, :attr:`Link.queue_packets <aiotsim.network.link.Link>`; default
:data:`~aiotsim.network.link.DEFAULT_QUEUE_PACKETS`), and where the network has them
``server_queue_packets`` / ``backhaul_queue_packets`` for the server's shared links and a
hierarchy's gateway backhaul (None: ``queue_packets``). A node's own links take
``per_node[i]["queue_packets"]`` where given, a custom link its own ``"queue_packets"`` key.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aiotsim.errors import ConfigError, TopologyError
from aiotsim.network.graph import Graph
from aiotsim.network.link import DEFAULT_QUEUE_PACKETS, Link
from aiotsim.network.traces import GilbertElliott

# Keys a node group may override in the builders' ``per_node`` lists.
_PER_NODE_KEYS = frozenset(
    {
        "uplink_bps",
        "downlink_bps",
        "latency_s",
        "loss",
        "jitter_s",
        "mtu",
        "header_bytes",
        "framing_bytes",
        "acks_per_packet",
        "uplink_trace",  # RateTrace of the node's up link (time-varying capacity)
        "downlink_trace",
        "loss_model",  # GilbertElliott of both node links
        "queue_packets",  # drop-tail buffer of both node links, packets
    }
)


class Topology(Graph):
    """A network built by one of the builders below (or by hand with ``add_node``/``add_link``).

    Examples
    --------
    >>> topo = Topology.star(2, 10e6, 10e6, latency_s=0.01, server_bps=100e6)
    >>> [link.name for link in topo.route("node0", "server")]
    ['node0.up', 'server.in']
    """

    # ------------------------------------------------------------------ builders
    @classmethod
    def star(
        cls,
        n_nodes: int,
        uplink_bps: float,
        downlink_bps: float,
        latency_s: float,
        server_bps: float,
        mtu: int = 1500,
        header_bytes: int = 40,
        loss: float = 0.0,
        jitter_s: float = 0.0,
        per_node: list[dict[str, Any]] | None = None,
        queue_packets: int = DEFAULT_QUEUE_PACKETS,
        server_queue_packets: int | None = None,
    ) -> Topology:
        """Parameter server behind one switch: every node has its own up and down link.

        Vertices ``server``, relay ``switch``, ``node0`` .. ``node{n-1}``. Routes:
        node i -> server = [``node{i}.up``, ``server.in``]; server -> node i =
        [``server.out``, ``node{i}.down``]; node i -> node j = [``node{i}.up``, ``node{j}.down``].
        The server links (capacity ``server_bps``, no latency) are shared by all nodes' flows.

        Parameters
        ----------
        n_nodes : int
            Number of training nodes, >= 1.
        uplink_bps, downlink_bps : float
            Each node's link capacities in bits/s.
        latency_s : float
            One-way latency of each node link in s.
        server_bps : float
            Capacity of the server's ingress and egress links in bits/s.
        mtu, header_bytes, loss, jitter_s
            Link settings of the node links (see :class:`Link`).
        per_node : list of dict, optional
            ``n_nodes`` dicts overriding node i's settings (keys: uplink_bps, downlink_bps,
            latency_s, loss, jitter_s, mtu, header_bytes, framing_bytes, acks_per_packet,
            queue_packets, traces, loss_model).
        queue_packets : int
            Drop-tail buffer of each node link, packets (>= 1).
        server_queue_packets : int, optional
            Drop-tail buffer of the server links, packets (default: ``queue_packets``).
        """
        _check_count("n_nodes", n_nodes)
        base = dict(
            uplink_bps=uplink_bps, downlink_bps=downlink_bps, latency_s=latency_s, loss=loss,
            jitter_s=jitter_s, mtu=mtu, header_bytes=header_bytes, queue_packets=queue_packets,
        )  # fmt: skip
        settings = _per_node_settings(n_nodes, base, per_node)
        topo = cls("star")
        topo.add_node("server", "server")
        topo.add_node("switch", "relay")
        _server_links(topo, "switch", server_bps, mtu, header_bytes, tier_packets(server_queue_packets, queue_packets))
        for i, s in enumerate(settings):
            topo._add_node_pair(f"node{i}", "switch", s, aggregator="server")
        return topo

    @classmethod
    def hierarchical(
        cls,
        groups: list[int],
        uplink_bps: float,
        downlink_bps: float,
        latency_s: float,
        backhaul_up_bps: float,
        backhaul_down_bps: float,
        backhaul_latency_s: float,
        server_bps: float | None = None,
        mtu: int = 1500,
        header_bytes: int = 40,
        loss: float = 0.0,
        jitter_s: float = 0.0,
        backhaul_loss: float = 0.0,
        per_node: list[dict[str, Any]] | None = None,
        queue_packets: int = DEFAULT_QUEUE_PACKETS,
        backhaul_queue_packets: int | None = None,
        server_queue_packets: int | None = None,
    ) -> Topology:
        """Sensors -> edge gateways -> server, with per-tier link settings.

        Gateway k (``gw{k}``) serves ``groups[k]`` nodes, numbered globally ``node0``, ``node1``..
        Node i's links to its gateway: ``node{i}.up`` / ``node{i}.down`` (sensor tier). Gateway k's
        backhaul: ``gw{k}.up`` / ``gw{k}.down``. With ``server_bps`` the gateways reach the server
        through a relay ``core`` and the shared ``server.in`` / ``server.out`` links; without it
        the backhaul links end at the server. Node i's aggregator is its gateway; a gateway's is the
        server.

        Parameters
        ----------
        groups : list of int
            Nodes per gateway, each >= 1.
        uplink_bps, downlink_bps, latency_s, backhaul_up_bps, backhaul_down_bps, backhaul_latency_s : float
            Sensor-tier and gateway-tier link settings (bits/s, bits/s, s).
        server_bps : float, optional
            Capacity of a shared server ingress/egress link in bits/s.
        mtu, header_bytes, loss, jitter_s
            Sensor-tier packet settings (the backhaul uses mtu, header_bytes and ``backhaul_loss``).
        per_node : list of dict, optional
            ``sum(groups)`` dicts overriding sensor-tier settings per node.
        queue_packets, backhaul_queue_packets, server_queue_packets : int
            Drop-tail buffers, packets: of each sensor-tier link, of the gateways' backhaul links
            and of the shared server links (the last two default to ``queue_packets``).
        """
        _check_groups(groups)
        base = dict(uplink_bps=uplink_bps, downlink_bps=downlink_bps, latency_s=latency_s, loss=loss,
                    jitter_s=jitter_s, mtu=mtu, header_bytes=header_bytes, queue_packets=queue_packets)  # fmt: skip
        settings = _per_node_settings(sum(groups), base, per_node)
        topo = cls("hierarchical")
        topo.add_node("server", "server")
        hub = topo._core(server_bps, mtu, header_bytes, tier_packets(server_queue_packets, queue_packets))
        backhaul = dict(uplink_bps=backhaul_up_bps, downlink_bps=backhaul_down_bps, latency_s=backhaul_latency_s,
                        loss=backhaul_loss, jitter_s=0.0, mtu=mtu, header_bytes=header_bytes,
                        queue_packets=tier_packets(backhaul_queue_packets, queue_packets))  # fmt: skip
        first = 0
        for k, count in enumerate(groups):
            topo._add_gateway(f"gw{k}", hub, backhaul, settings, range(first, first + count))
            first += count
        return topo

    def _core(self, server_bps: float | None, mtu: int, header_bytes: int, queue_packets: int) -> str:
        """Where a hierarchy's backhaul ends: the server, or with ``server_bps`` a relay ``core``
        that reaches it over the shared server links (``queue_packets`` each)."""
        if server_bps is None:
            return "server"
        self.add_node("core", "relay")
        _server_links(self, "core", server_bps, mtu, header_bytes, queue_packets)
        return "core"

    def _add_gateway(
        self, gw: str, hub: str, backhaul: dict[str, Any], settings: list[dict[str, Any]], nodes: range
    ) -> None:
        """Gateway ``gw`` with its backhaul to ``hub`` and nodes ``nodes`` (global indices) behind it."""
        self.add_node(gw, "gateway", aggregator="server")
        self._add_links_pair(gw, hub, backhaul)
        for i in nodes:
            self._add_node_pair(f"node{i}", gw, settings[i], aggregator=gw)

    @classmethod
    def ring(
        cls,
        n_nodes: int,
        link_bps: float,
        latency_s: float = 0.0,
        mtu: int = 1500,
        header_bytes: int = 40,
        loss: float = 0.0,
        jitter_s: float = 0.0,
        per_node: list[dict[str, Any]] | None = None,
        queue_packets: int = DEFAULT_QUEUE_PACKETS,
    ) -> Topology:
        """Ring of peers for ring all-reduce: links node i <-> node (i+1) % n, both directions.

        Link names ``node{i}->node{j}``; each direction is its own resource. The link node a ->
        node b takes node a's settings: ``link_bps`` etc., or ``per_node[a]`` (its ``uplink_bps``,
        latency_s, loss, jitter_s, mtu, header_bytes, queue_packets), so heterogeneous nodes and
        link stragglers apply. A ring has no server and no aggregator.
        """
        if not isinstance(n_nodes, int) or isinstance(n_nodes, bool) or n_nodes < 2:
            raise TopologyError(f"n_nodes(={n_nodes}) must be an integer >= 2 for a ring")
        base = dict(
            uplink_bps=link_bps, downlink_bps=link_bps, latency_s=latency_s, loss=loss,
            jitter_s=jitter_s, mtu=mtu, header_bytes=header_bytes, queue_packets=queue_packets,
        )  # fmt: skip
        settings = _per_node_settings(n_nodes, base, per_node)
        topo = cls("ring")
        for i in range(n_nodes):
            topo.add_node(f"node{i}", "node")
        pairs = [(i, (i + 1) % n_nodes) for i in range(n_nodes)]
        if n_nodes == 2:
            pairs = [(0, 1)]  # node0 -> node1 and node1 -> node0 are the whole ring
        for i, j in pairs:
            for a, b in ((i, j), (j, i)):
                st = settings[a]
                link = Link(
                    f"node{a}->node{b}", st["uplink_bps"], st["latency_s"], st["mtu"], st["header_bytes"],
                    st["loss"], st["jitter_s"], trace=st.get("uplink_trace"), loss_model=st.get("loss_model"),
                    queue_packets=st["queue_packets"],
                )  # fmt: skip
                topo.add_link(f"node{a}", f"node{b}", link)
        return topo

    @classmethod
    def shared_medium(
        cls,
        n_nodes: int,
        channel_bps: float,
        latency_s: float,
        server_bps: float | None = None,
        mtu: int = 1500,
        header_bytes: int = 40,
        loss: float = 0.0,
        jitter_s: float = 0.0,
        acks_per_packet: float = 0.0,
        loss_model: GilbertElliott | None = None,
        queue_packets: int = DEFAULT_QUEUE_PACKETS,
        server_queue_packets: int | None = None,
    ) -> Topology:
        """One cell: every node's up *and* down traffic shares one channel's airtime.

        Vertices ``server``, relay ``ap`` (the access point), ``node0`` .. ``node{n-1}``. Every edge
        node <-> ap carries the same ``Link`` named ``channel`` (half-duplex: one resource for
        both directions). The ap reaches the server over ``server.in`` / ``server.out``
        (``server_bps``, default: 1000 x the channel, i.e. never the bottleneck).
        Routes: node i -> server = [channel, server.in]; server -> node i = [server.out, channel].

        Parameters
        ----------
        n_nodes : int
            Nodes in the cell, >= 1.
        channel_bps : float
            Channel capacity in bits/s (airtime shared by all transmissions).
        latency_s : float
            One-way latency over the channel in s.
        server_bps : float, optional
            Capacity of the ap <-> server links in bits/s.
        mtu, header_bytes, loss, jitter_s, acks_per_packet
            Channel settings (see :class:`Link`); ``acks_per_packet`` charges the receivers'
            ACKs to the shared airtime.
        loss_model : GilbertElliott, optional
            Bursty loss of the channel (then ``loss`` must be 0).
        queue_packets : int
            Drop-tail buffer of the channel, packets (>= 1).
        server_queue_packets : int, optional
            Drop-tail buffer of the ap <-> server links, packets (default: ``queue_packets``).
        """
        _check_count("n_nodes", n_nodes)
        topo = cls("shared_medium")
        topo.add_node("server", "server")
        topo.add_node("ap", "relay")
        backbone = channel_bps * 1000.0 if server_bps is None else server_bps
        _server_links(topo, "ap", backbone, mtu, header_bytes, tier_packets(server_queue_packets, queue_packets))
        channel = Link(
            "channel", channel_bps, latency_s, mtu, header_bytes, loss, jitter_s,
            acks_per_packet=acks_per_packet, loss_model=loss_model, queue_packets=queue_packets,
        )  # fmt: skip
        for i in range(n_nodes):
            node = f"node{i}"
            topo.add_node(node, "node", aggregator="server")
            topo.add_link(node, "ap", channel)
            topo.add_link("ap", node, channel)
        return topo

    @classmethod
    def from_links(
        cls, nodes: list[dict[str, Any]], links: list[dict[str, Any]], queue_packets: int = DEFAULT_QUEUE_PACKETS
    ) -> Topology:
        """A custom topology from a scenario file's lists.

        Parameters
        ----------
        nodes : list of dict
            ``{"name": str, "role": "node"|"server"|"gateway"|"relay", "aggregator": str}``
            (role defaults to ``"node"``; aggregator is optional).
        links : list of dict
            ``{"from": str, "to": str, "mbps": float, "latency_ms": float}`` plus optional
            ``"name"``, ``"loss"``, ``"jitter_ms"``, ``"mtu"``, ``"header_bytes"``,
            ``"framing_bytes"``, ``"acks_per_packet"``, ``"queue_packets"`` (the link's drop-tail
            buffer, packets), ``"directed": bool``, ``"trace"`` (a
            :class:`~aiotsim.network.traces.RateTrace` giving the capacity over time; ``mbps``
            stays the nominal rate) and ``"loss_model"`` (a :class:`GilbertElliott`). An
            undirected entry (the default) adds two links, ``a->b`` and ``b->a``, each of ``mbps``
            (and of the same trace).
        queue_packets : int
            Drop-tail buffer, packets, of every link whose entry sets no ``"queue_packets"``.

        Raises
        ------
        TopologyError
            Every problem in the lists at once (unknown node, bad key, bad value), one per line.

        Notes
        -----
        Connectivity is not checked here: call :meth:`validate`.
        """
        topo = cls("custom")
        problems: list[str] = []
        for k, spec in enumerate(nodes):
            try:
                topo.add_node(spec["name"], spec.get("role", "node"), spec.get("aggregator"))
            except KeyError:
                problems.append(f"nodes[{k}]: missing key 'name'")
            except (TopologyError, TypeError) as exc:
                problems.append(f"nodes[{k}]: {exc}")
        for k, spec in enumerate(links):
            problem = topo._add_link_spec(spec, queue_packets)
            if problem:
                problems.append(f"links[{k}]: {problem}")
        if problems:
            raise TopologyError("\n".join(problems))
        return topo

    def _add_link_spec(self, spec: dict[str, Any], queue_packets: int) -> str | None:
        """Add the link(s) of one ``from_links`` entry (``queue_packets`` unless it sets its own);
        returns what is wrong with it, if anything."""
        unknown = sorted(set(spec) - _LINK_KEYS)
        if unknown:
            return f"unknown key(s) {', '.join(unknown)}"
        missing = [key for key in ("from", "to", "mbps") if key not in spec]
        if missing:
            return f"missing key(s) {', '.join(missing)}"
        a, b = spec["from"], spec["to"]
        ends = [(a, b)] if spec.get("directed", False) else [(a, b), (b, a)]
        for src, dst in ends:
            name = spec.get("name", f"{src}->{dst}")
            if len(ends) == 2 and "name" in spec:
                name = f"{spec['name']}:{src}->{dst}"
            try:
                link = Link(
                    name=name,
                    bandwidth_bps=float(spec["mbps"]) * 1e6,
                    latency_s=float(spec.get("latency_ms", 0.0)) / 1e3,
                    mtu=int(spec.get("mtu", 1500)),
                    header_bytes=int(spec.get("header_bytes", 40)),
                    loss=float(spec.get("loss", 0.0)),
                    jitter_s=float(spec.get("jitter_ms", 0.0)) / 1e3,
                    framing_bytes=int(spec.get("framing_bytes", 0)),
                    acks_per_packet=float(spec.get("acks_per_packet", 0.0)),
                    trace=spec.get("trace"),
                    loss_model=spec.get("loss_model"),
                    queue_packets=spec.get("queue_packets", queue_packets),
                )
                self.add_link(src, dst, link)
            except (TopologyError, ConfigError, ValueError, TypeError) as exc:
                return str(exc)
        return None

    def _add_node_pair(self, node: str, hub: str, s: dict[str, Any], aggregator: str) -> None:
        """Add training node ``node`` with links ``node.up`` (to hub) and ``node.down``."""
        self.add_node(node, "node", aggregator=aggregator)
        self._add_links_pair(node, hub, s)

    def _add_links_pair(self, name: str, hub: str, s: dict[str, Any]) -> None:
        common = dict(
            latency_s=s["latency_s"], mtu=s["mtu"], header_bytes=s["header_bytes"],
            loss=s["loss"], jitter_s=s["jitter_s"], framing_bytes=s.get("framing_bytes", 0),
            acks_per_packet=s.get("acks_per_packet", 0.0), loss_model=s.get("loss_model"),
            queue_packets=s["queue_packets"],
        )  # fmt: skip
        self.add_link(name, hub, Link(f"{name}.up", s["uplink_bps"], trace=s.get("uplink_trace"), **common))
        self.add_link(hub, name, Link(f"{name}.down", s["downlink_bps"], trace=s.get("downlink_trace"), **common))


_LINK_KEYS = frozenset(
    {
        "from", "to", "mbps", "latency_ms", "name", "loss", "jitter_ms", "mtu",
        "header_bytes", "framing_bytes", "acks_per_packet", "directed", "trace", "loss_model", "queue_packets",
    }
)  # fmt: skip


def _server_links(topo: Topology, hub: str, server_bps: float, mtu: int, header: int, queue_packets: int) -> None:
    """The server's shared ingress/egress links between ``hub`` and ``server`` (no latency; a
    drop-tail buffer of ``queue_packets`` packets each)."""
    topo.add_link(hub, "server", Link("server.in", server_bps, 0.0, mtu, header, queue_packets=queue_packets))
    topo.add_link("server", hub, Link("server.out", server_bps, 0.0, mtu, header, queue_packets=queue_packets))


def tier_packets(queue_packets: int | None, default: int) -> int:
    """A tier's own drop-tail buffer (server links, backhaul), packets, or (None) the builder's
    ``queue_packets``, ``default``."""
    return default if queue_packets is None else queue_packets


def _check_groups(groups: list[int]) -> None:
    if not groups:
        raise TopologyError("groups(=[]) must list at least one gateway's node count")
    for k, count in enumerate(groups):
        _check_count(f"groups[{k}]", count)


def _check_count(what: str, n: object) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise TopologyError(f"{what}(={n!r}) must be an integer >= 1")


def _per_node_settings(n: int, base: dict[str, Any], per_node: Iterable[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """``n`` copies of ``base`` with the per-node overrides applied (unknown keys refused)."""
    if per_node is None:
        return [dict(base) for _ in range(n)]
    overrides = list(per_node)
    if len(overrides) != n:
        raise TopologyError(f"per_node has {len(overrides)} entries, expected one per node ({n})")
    out = []
    for i, extra in enumerate(overrides):
        unknown = sorted(set(extra) - _PER_NODE_KEYS)
        if unknown:
            raise TopologyError(
                f"per_node[{i}]: unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(_PER_NODE_KEYS))}"
            )
        out.append({**base, **extra})
    return out
