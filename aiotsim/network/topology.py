"""Topology: a directed graph of named endpoints joined by :class:`~aiotsim.network.link.Link` s.

Vertices have a role: ``"node"`` (a sensor that trains), ``"server"`` (the parameter server),
``"gateway"`` (an edge gateway that aggregates its nodes' gradients) or ``"relay"`` (a switch or
access point that only forwards; builders use it to put a shared server link or a shared radio
channel behind the nodes' own links). Each directed edge carries one ``Link``; a ``Link`` placed on
several edges is one shared resource (same name, same settings).

Routes are deterministic shortest paths in hops (breadth-first search, neighbours visited in the
order their edges were added), cached until the graph changes. Every training node has an
aggregator (its gateway, or the server); :meth:`Topology.validate` lists what keeps a topology from
working, one problem per line.

Builders: :meth:`Topology.star`, :meth:`Topology.hierarchical`, :meth:`Topology.ring`,
:meth:`Topology.shared_medium` and :meth:`Topology.from_links` (custom graphs from a scenario file).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from aiotsim.errors import ConfigError, TopologyError
from aiotsim.network.link import Link
from aiotsim.network.traces import GilbertElliott

ROLES = ("node", "server", "gateway", "relay")
MAX_LISTED = 20  # disconnected vertices named one per line by Topology.validate; the rest counted

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
    }
)


class Topology:
    """A directed graph of named vertices (with roles) and links.

    Examples
    --------
    >>> topo = Topology.star(2, 10e6, 10e6, latency_s=0.01, server_bps=100e6)
    >>> [link.name for link in topo.route("node0", "server")]
    ['node0.up', 'server.in']
    """

    def __init__(self, kind: str = "custom") -> None:
        self.kind = kind  # builder name: star, hierarchical, ring, shared_medium, custom
        self._roles: dict[str, str] = {}  # vertex name -> role
        self._out: dict[str, dict[str, Link]] = {}  # src -> {dst: link}, in insertion order
        self._links: dict[str, Link] = {}  # link name -> Link (one resource per name)
        self._aggregator: dict[str, str] = {}  # vertex -> its aggregator
        self._routes: dict[tuple[str, str], tuple[list[Link], list[str]]] = {}  # (links, vertices)
        self._trees: dict[str, dict[str, tuple[int, str | None]]] = {}  # src -> whole BFS tree
        self._searches: dict[str, int] = {}  # src -> searches started from it

    # ------------------------------------------------------------------ construction
    def add_node(self, name: str, role: str, aggregator: str | None = None) -> None:
        """Add a vertex.

        Parameters
        ----------
        name : str
            Unique vertex name.
        role : str
            One of ``"node"``, ``"server"``, ``"gateway"``, ``"relay"``.
        aggregator : str, optional
            The vertex this one sends its gradients to (default: found by :meth:`aggregator_of`).
        """
        if not isinstance(name, str) or not name:
            raise TopologyError(f"node name(={name!r}) must be a non-empty string")
        if role not in ROLES:
            raise TopologyError(f"role(={role!r}) of {name!r} must be one of {', '.join(ROLES)}")
        if name in self._roles:
            raise TopologyError(f"node {name!r} is already in the topology")
        self._roles[name] = role
        self._out[name] = {}
        if aggregator is not None:
            self._aggregator[name] = aggregator
        self._forget_routes()

    def add_link(self, src: str, dst: str, link: Link) -> None:
        """Add the directed edge ``src -> dst`` carried by ``link``.

        A link name already used elsewhere must come with identical settings: it is the same
        resource (a shared channel), not a second one.
        """
        for end in (src, dst):
            if end not in self._roles:
                raise TopologyError(f"link {link.name!r}: unknown node {end!r}")
        if src == dst:
            raise TopologyError(f"link {link.name!r}: a link from {src!r} to itself is not allowed")
        if dst in self._out[src]:
            raise TopologyError(f"there is already a link from {src!r} to {dst!r}")
        known = self._links.get(link.name)
        if known is not None and known != link:
            raise TopologyError(
                f"link name {link.name!r} is used twice with different settings; "
                "reuse the same Link object to share one resource"
            )
        self._links[link.name] = link
        self._out[src][dst] = link
        self._forget_routes()

    # ------------------------------------------------------------------ queries
    @property
    def nodes(self) -> list[str]:
        """Training nodes (role ``"node"``), in insertion order."""
        return self._with_role("node")

    @property
    def servers(self) -> list[str]:
        """Parameter servers (role ``"server"``)."""
        return self._with_role("server")

    @property
    def gateways(self) -> list[str]:
        """Edge gateways (role ``"gateway"``)."""
        return self._with_role("gateway")

    @property
    def relays(self) -> list[str]:
        """Forwarding-only vertices (role ``"relay"``)."""
        return self._with_role("relay")

    @property
    def vertices(self) -> list[str]:
        """Every vertex, in insertion order."""
        return list(self._roles)

    @property
    def links(self) -> dict[str, Link]:
        """Every link resource by name."""
        return dict(self._links)

    def role(self, name: str) -> str:
        """Role of vertex ``name``."""
        self._check_known(name)
        return self._roles[name]

    def neighbours(self, name: str) -> list[str]:
        """Vertices reachable from ``name`` over one edge."""
        self._check_known(name)
        return list(self._out[name])

    def aggregator_of(self, node: str) -> str:
        """The vertex that aggregates ``node``'s gradients.

        The aggregator given to :meth:`add_node`, else the only server, else the nearest gateway or
        server by hops. Raises :class:`TopologyError` when there is none (a ring has no aggregator:
        its peers reduce among themselves).
        """
        self._check_known(node)
        if node in self._aggregator:
            return self._aggregator[node]
        servers = self.servers
        if self._roles[node] == "server":
            raise TopologyError(f"{node!r} is a server: it has no aggregator")
        if len(servers) == 1:
            return servers[0]
        hops = self._bfs(node)
        best = [v for v in hops if self._roles[v] in ("gateway", "server") and v != node]
        if not best:
            why = ", ring topology: peers reduce among themselves" if self.kind == "ring" else ""
            raise TopologyError(f"{node!r} has no aggregator (no server or gateway reachable{why})")
        return min(best, key=lambda v: hops[v][0])

    def route(self, src: str, dst: str) -> list[Link]:
        """Links of the shortest path (in hops) from ``src`` to ``dst``.

        Deterministic: ties go to the neighbour whose edge was added first. An empty list when
        ``src == dst``. Raises :class:`TopologyError` when ``dst`` cannot be reached.
        """
        return list(self._route(src, dst)[0])

    def route_nodes(self, src: str, dst: str) -> list[str]:
        """Vertices of :meth:`route` from ``src`` to ``dst``, both ends included."""
        return list(self._route(src, dst)[1])

    def route_with_nodes(self, src: str, dst: str) -> tuple[list[Link], list[str]]:
        """:meth:`route` and :meth:`route_nodes` of one pair from one cache lookup (new lists)."""
        links, nodes = self._route(src, dst)
        return list(links), list(nodes)

    def _route(self, src: str, dst: str) -> tuple[list[Link], list[str]]:
        """The cached (links, vertices) of the route; the cost of a new pair is the search up to
        ``dst`` (a first search from a vertex stops there; a second one keeps the whole tree), so
        a star of 100,000 nodes routes every node in O(path), not O(vertices) each."""
        self._check_known(src)
        self._check_known(dst)
        key = (src, dst)
        cached = self._routes.get(key)
        if cached is not None:
            return cached
        outs = self._out[src]
        if src == dst:
            path: tuple[list[Link], list[str]] = ([], [src])
        elif len(outs) == 1:  # one way out (a sensor behind its gateway)
            path = self._walk(src, dst)
        else:
            parents = self._trees.get(src)
            if parents is None:
                self._searches[src] = self._searches.get(src, 0) + 1
                whole = self._searches[src] > 1  # a vertex that sends to many: keep its tree
                parents = self._bfs(src, None if whole else dst)
                if whole:
                    self._trees[src] = parents
            if dst not in parents:
                raise TopologyError(f"no route from {src!r} to {dst!r}")
            nodes = [dst]
            while nodes[-1] != src:
                prev = parents[nodes[-1]][1]
                assert prev is not None
                nodes.append(prev)
            nodes.reverse()
            path = ([self._out[a][b] for a, b in zip(nodes, nodes[1:])], nodes)
        self._routes[key] = path
        return path

    def _walk(self, src: str, dst: str) -> tuple[list[Link], list[str]]:
        """The route from ``src``, which has one way out, to ``dst``: along vertices with one way out
        until ``dst`` or a vertex with several, then that vertex's route. The same route as a search
        from ``src``: it meets the other vertices in the order a search from that vertex does, so
        their parents are the same, and no shortest route from it passes the vertices walked,
        whose only ways out lead back to it. A gateway's nodes share its search (its second keeps
        its tree) instead of each visiting the gateway's other nodes."""
        links: list[Link] = []
        nodes, walked = [src], {src}
        v = src
        while len(self._out[v]) == 1:
            ((v, link),) = self._out[v].items()
            if v in walked:  # a loop of one-way vertices without dst
                break
            links.append(link)
            nodes.append(v)
            walked.add(v)
            if v == dst:
                return links, nodes
        else:
            try:
                more, rest = self._route(v, dst)
            except TopologyError:
                raise TopologyError(f"no route from {src!r} to {dst!r}") from None
            return links + more, nodes + rest[1:]
        raise TopologyError(f"no route from {src!r} to {dst!r}")

    def validate(self) -> list[str]:
        """Problems that keep this topology from carrying a training round, one per line.

        Checks: at least one node; every vertex has a link (else it is *disconnected*, reported
        once); every training node and gateway can reach its aggregator and be reached back from it
        (else *unroutable*, reported once); a ring's nodes all reach each other. An empty list means
        the topology is usable.
        """
        problems = [] if self.nodes else ["topology has no training node (role 'node')"]
        linked: set[str] = set()
        for src, outs in self._out.items():
            if outs:
                linked.add(src)
                linked.update(outs)
        disconnected = [v for v in self._roles if v not in linked]
        problems += [f"node {v!r} is disconnected: it has no link" for v in disconnected[:MAX_LISTED]]
        if len(disconnected) > MAX_LISTED:
            problems.append(f"... and {len(disconnected) - MAX_LISTED:,} more vertices with no link")
        skip = set(disconnected)
        reach: dict[tuple[str, bool], set[str]] = {}  # (aggregator, backwards) -> the vertices reached
        for v in self._roles:
            if v in skip or self._roles[v] not in ("node", "gateway"):
                continue
            if self.kind == "ring":
                missing = [w for w in self.nodes if w != v and w not in self._bfs(v)]
                if missing:
                    problems.append(f"node {v!r} cannot reach ring peer(s) {', '.join(missing)}")
                continue
            problem = self._aggregator_problem(v, reach)
            if problem:
                problems.append(problem)
        return problems

    def _aggregator_problem(self, v: str, reach: dict[tuple[str, bool], set[str]]) -> str | None:
        """Why node or gateway ``v`` cannot send to its aggregator and hear back from it, if it
        cannot. ``reach`` caches, per aggregator, the vertices it reaches and those that reach it
        (one search each per aggregator, not one per node: 100,000 nodes took minutes)."""
        try:
            agg = self.aggregator_of(v)
        except TopologyError as exc:
            return str(exc)
        if agg not in self._roles:
            return f"node {v!r} has an unknown aggregator {agg!r}"
        # aggregation has two tiers: a node sends to a gateway or the server, a gateway to the
        # server (the run delivers a gateway's merged update to the server, and only those two
        # roles sum updates: a node or relay as aggregator ends the run in a KeyError)
        allowed = ("server",) if self._roles[v] == "gateway" else ("server", "gateway")
        if self._roles[agg] not in allowed:
            return (
                f"{self._roles[v]} {v!r} has aggregator {agg!r}, a {self._roles[agg]}; a {self._roles[v]}'s "
                f"aggregator must be {' or '.join(f'a {r}' for r in allowed)}: set it to one, or omit it"
            )
        for backwards in (False, True):
            if (agg, backwards) not in reach:
                reach[agg, backwards] = self._reached(agg, backwards)
        way = [d for d, backwards in ((agg, True), (v, False)) if v not in reach[agg, backwards]]
        if not way:
            return None
        direction = " and ".join(f"from {agg!r}" if d == v else f"to {agg!r}" for d in way)
        return f"node {v!r} is unroutable: no route {direction} (its aggregator)"

    def _reached(self, src: str, backwards: bool) -> set[str]:
        """Vertices ``src`` reaches over the links (``backwards``: the vertices that reach ``src``)."""
        edges: dict[str, list[str]] = {}
        for a, outs in self._out.items():
            for b in outs:
                head, tail = (b, a) if backwards else (a, b)
                edges.setdefault(head, []).append(tail)
        seen = {src}
        queue = deque([src])
        while queue:
            for w in edges.get(queue.popleft(), ()):
                if w not in seen:
                    seen.add(w)
                    queue.append(w)
        return seen

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
            latency_s, loss, jitter_s, mtu, header_bytes, framing_bytes, acks_per_packet).
        """
        _check_count("n_nodes", n_nodes)
        base = dict(
            uplink_bps=uplink_bps, downlink_bps=downlink_bps, latency_s=latency_s, loss=loss,
            jitter_s=jitter_s, mtu=mtu, header_bytes=header_bytes,
        )  # fmt: skip
        settings = _per_node_settings(n_nodes, base, per_node)
        topo = cls("star")
        topo.add_node("server", "server")
        topo.add_node("switch", "relay")
        _server_links(topo, "switch", server_bps, mtu, header_bytes)
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
        """
        _check_groups(groups)
        base = dict(uplink_bps=uplink_bps, downlink_bps=downlink_bps, latency_s=latency_s, loss=loss,
                    jitter_s=jitter_s, mtu=mtu, header_bytes=header_bytes)  # fmt: skip
        settings = _per_node_settings(sum(groups), base, per_node)
        topo = cls("hierarchical")
        topo.add_node("server", "server")
        hub = "server"
        if server_bps is not None:  # the gateways reach the server through a relay and shared links
            hub = "core"
            topo.add_node(hub, "relay")
            _server_links(topo, hub, server_bps, mtu, header_bytes)
        backhaul = dict(uplink_bps=backhaul_up_bps, downlink_bps=backhaul_down_bps, latency_s=backhaul_latency_s,
                        loss=backhaul_loss, jitter_s=0.0, mtu=mtu, header_bytes=header_bytes)  # fmt: skip
        first = 0
        for k, count in enumerate(groups):
            topo._add_gateway(f"gw{k}", hub, backhaul, settings, range(first, first + count))
            first += count
        return topo

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
    ) -> Topology:
        """Ring of peers for ring all-reduce: links node i <-> node (i+1) % n, both directions.

        Link names ``node{i}->node{j}``; each direction is its own resource. The link node a ->
        node b takes node a's settings: ``link_bps`` etc., or ``per_node[a]`` (its ``uplink_bps``,
        latency_s, loss, jitter_s, mtu, header_bytes), so heterogeneous nodes and link stragglers
        apply. A ring has no server and no aggregator.
        """
        if not isinstance(n_nodes, int) or isinstance(n_nodes, bool) or n_nodes < 2:
            raise TopologyError(f"n_nodes(={n_nodes}) must be an integer >= 2 for a ring")
        base = dict(
            uplink_bps=link_bps, downlink_bps=link_bps, latency_s=latency_s, loss=loss,
            jitter_s=jitter_s, mtu=mtu, header_bytes=header_bytes,
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
        """
        _check_count("n_nodes", n_nodes)
        topo = cls("shared_medium")
        topo.add_node("server", "server")
        topo.add_node("ap", "relay")
        backbone = channel_bps * 1000.0 if server_bps is None else server_bps
        _server_links(topo, "ap", backbone, mtu, header_bytes)
        channel = Link(
            "channel", channel_bps, latency_s, mtu, header_bytes, loss, jitter_s,
            acks_per_packet=acks_per_packet, loss_model=loss_model,
        )  # fmt: skip
        for i in range(n_nodes):
            node = f"node{i}"
            topo.add_node(node, "node", aggregator="server")
            topo.add_link(node, "ap", channel)
            topo.add_link("ap", node, channel)
        return topo

    @classmethod
    def from_links(cls, nodes: list[dict[str, Any]], links: list[dict[str, Any]]) -> Topology:
        """A custom topology from a scenario file's lists.

        Parameters
        ----------
        nodes : list of dict
            ``{"name": str, "role": "node"|"server"|"gateway"|"relay", "aggregator": str}``
            (role defaults to ``"node"``; aggregator is optional).
        links : list of dict
            ``{"from": str, "to": str, "mbps": float, "latency_ms": float}`` plus optional
            ``"name"``, ``"loss"``, ``"jitter_ms"``, ``"mtu"``, ``"header_bytes"``,
            ``"framing_bytes"``, ``"acks_per_packet"``, ``"directed": bool``, ``"trace"`` (a
            :class:`~aiotsim.network.traces.RateTrace` giving the capacity over time; ``mbps``
            stays the nominal rate) and ``"loss_model"`` (a :class:`GilbertElliott`). An
            undirected entry (the default) adds two links, ``a->b`` and ``b->a``, each of ``mbps``
            (and of the same trace).

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
            problem = topo._add_link_spec(spec)
            if problem:
                problems.append(f"links[{k}]: {problem}")
        if problems:
            raise TopologyError("\n".join(problems))
        return topo

    def _add_link_spec(self, spec: dict[str, Any]) -> str | None:
        """Add the link(s) of one ``from_links`` entry; returns what is wrong with it, if anything."""
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
                )
                self.add_link(src, dst, link)
            except (TopologyError, ConfigError, ValueError, TypeError) as exc:
                return str(exc)
        return None

    # ------------------------------------------------------------------ helpers
    def _with_role(self, role: str) -> list[str]:
        return [v for v, r in self._roles.items() if r == role]

    def _forget_routes(self) -> None:
        """Drop every cached route and search tree (the graph changed)."""
        self._routes.clear()
        self._trees.clear()
        self._searches.clear()

    def _check_known(self, name: str) -> None:
        if name not in self._roles:
            raise TopologyError(f"unknown node {name!r}")

    def _bfs(self, src: str, stop: str | None = None) -> dict[str, tuple[int, str | None]]:
        """Breadth-first search from ``src``: vertex -> (hops, parent); it ends as soon as ``stop``
        is reached (the parents found up to then are those of the full search: ``stop``'s is the
        first vertex in search order it is a neighbour of, so that vertex's other neighbours need
        not be visited)."""
        seen: dict[str, tuple[int, str | None]] = {src: (0, None)}
        queue = deque([src])
        while queue:
            v = queue.popleft()
            hops = seen[v][0] + 1
            outs = self._out[v]
            if stop is not None and stop in outs:  # not seen: the search would have ended
                seen[stop] = (hops, v)
                return seen
            for w in outs:
                if w not in seen:
                    seen[w] = (hops, v)
                    queue.append(w)
        return seen

    def _add_node_pair(self, node: str, hub: str, s: dict[str, Any], aggregator: str) -> None:
        """Add training node ``node`` with links ``node.up`` (to hub) and ``node.down``."""
        self.add_node(node, "node", aggregator=aggregator)
        self._add_links_pair(node, hub, s)

    def _add_links_pair(self, name: str, hub: str, s: dict[str, Any]) -> None:
        common = dict(
            latency_s=s["latency_s"], mtu=s["mtu"], header_bytes=s["header_bytes"],
            loss=s["loss"], jitter_s=s["jitter_s"], framing_bytes=s.get("framing_bytes", 0),
            acks_per_packet=s.get("acks_per_packet", 0.0), loss_model=s.get("loss_model"),
        )  # fmt: skip
        self.add_link(name, hub, Link(f"{name}.up", s["uplink_bps"], trace=s.get("uplink_trace"), **common))
        self.add_link(hub, name, Link(f"{name}.down", s["downlink_bps"], trace=s.get("downlink_trace"), **common))


_LINK_KEYS = frozenset(
    {
        "from", "to", "mbps", "latency_ms", "name", "loss", "jitter_ms", "mtu",
        "header_bytes", "framing_bytes", "acks_per_packet", "directed", "trace", "loss_model",
    }
)  # fmt: skip


def _server_links(topo: Topology, hub: str, server_bps: float, mtu: int, header: int) -> None:
    """The server's shared ingress/egress links between ``hub`` and ``server`` (no latency)."""
    topo.add_link(hub, "server", Link("server.in", server_bps, 0.0, mtu, header))
    topo.add_link("server", hub, Link("server.out", server_bps, 0.0, mtu, header))


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
