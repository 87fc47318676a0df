"""Simulated network: links, packet overhead, topologies and max-min fair flows (no torch here).

* :mod:`~aiotsim.network.link` -- :class:`Link`, one capacity resource.
* :mod:`~aiotsim.network.overhead` -- packets and wire bytes of a payload, loss overhead.
* :mod:`~aiotsim.network.topology` -- :class:`Topology` and its builders (star, hierarchical, ring,
  shared medium, custom).
* :mod:`~aiotsim.network.flows` -- :class:`Network`: SimPy transfers sharing links max-min fairly.
* :mod:`~aiotsim.network.tcp` -- TCP congestion windows on top of the fair shares (slow start,
  CUBIC/Reno, loss, idle restart, handshakes).
* :mod:`~aiotsim.network.calibrate` -- comparison with real TCP over a shaped loopback.
* :mod:`~aiotsim.network.calibrate_ns3` -- comparison with ns-3's packet-level TCP.
"""

from aiotsim.network.flows import FlowState, Network, Transfer, max_min_rates
from aiotsim.network.link import Link
from aiotsim.network.overhead import packets, retransmission_delay, wire_bytes
from aiotsim.network.topology import Topology

__all__ = [
    "FlowState",
    "Link",
    "Network",
    "Topology",
    "Transfer",
    "max_min_rates",
    "packets",
    "retransmission_delay",
    "wire_bytes",
]
