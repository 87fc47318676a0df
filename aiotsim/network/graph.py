"""Graph: a directed graph of named endpoints joined by :class:`~aiotsim.network.link.Link` s.

Vertices have a role: ``"node"`` (a sensor that trains), ``"server"`` (the parameter server),
``"gateway"`` (an edge gateway that aggregates its nodes' gradients) or ``"relay"`` (a switch or
access point that only forwards; builders use it to put a shared server link or a shared radio
channel behind the nodes' own links). Each directed edge carries one ``Link``; a ``Link`` placed on
several edges is one shared resource (same name, same settings).

Routes are deterministic shortest paths in hops (breadth-first search, neighbours visited in the
order their edges were added), cached until the graph changes. Every training node has an
aggregator (its gateway, or the server); :meth:`Graph.validate` lists what keeps a topology from
working, one problem per line.

The builders of whole networks (star, hierarchical, ring, shared medium, custom) are
:class:`~aiotsim.network.topology.Topology`'s, a subclass: this module is the graph and its routes
alone (split out of ``topology.py`` to keep each file short).
"""

from __future__ import annotations

from collections import deque

from aiotsim.errors import TopologyError
from aiotsim.network.link import Link

ROLES = ("node", "server", "gateway", "relay")
MAX_LISTED = 20  # disconnected vertices named one per line by Graph.validate; the rest counted


class Graph:
    """A directed graph of named vertices (with roles) and links, with cached shortest routes.

    Build networks with :class:`~aiotsim.network.topology.Topology`'s builders; this class holds
    the construction (:meth:`add_node`, :meth:`add_link`), the queries and the routes.
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

    @property
    def edges(self) -> dict[tuple[str, str], Link]:
        """Every directed edge ``(src, dst)`` and its link, in the order they were added."""
        return {(a, b): link for a, out in self._out.items() for b, link in out.items()}

    def unqueued_links(self) -> set[str]:
        """Links that can never hold a queue: a relay's link whose capacity is at least what every
        other link into the relay can bring (the link back from its far end excluded: a packet
        does not return where it came from). A relay originates nothing, so nothing reaches such
        a link faster than it drains: a 20 Mbit/s core link behind two 10 Mbit/s gateway
        backhauls. A shared channel, or a link whose rate a trace moves (its own or a feeder's),
        is never one."""
        uses: dict[str, int] = {}
        into: dict[str, list[tuple[str, Link]]] = {}
        for a, out in self._out.items():
            for b, link in out.items():
                uses[link.name] = uses.get(link.name, 0) + 1
                into.setdefault(b, []).append((a, link))
        found = set()
        for a in self._with_role("relay"):
            for b, link in self._out[a].items():
                feeders = [f for x, f in into.get(a, []) if x != b]
                if uses[link.name] > 1 or any(f.trace is not None for f in [link, *feeders]):
                    continue
                if link.capacity_Bps >= sum(f.capacity_Bps for f in feeders) * (1.0 - 1e-12):
                    found.add(link.name)
        return found

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
