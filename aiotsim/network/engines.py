"""The network engines a scenario can name (``network.engine``): building one, and ending it.

* ``"flow"``: :class:`~aiotsim.network.flows.Network`, the fluid model (TCP windows over max-min
  or FIFO sharing); nothing to end.
* ``"ns3"``: :class:`~aiotsim.network.ns3_engine.Ns3Network`, ns-3 packet by packet in a worker
  process; its measurements go into the run's summary and its worker is ended with the run.
"""

from __future__ import annotations

from typing import Any

import simpy

from aiotsim.errors import AiotsimError
from aiotsim.network.flows import Network, transport_options
from aiotsim.network.ns3_engine import Ns3Network
from aiotsim.network.ns3_spec import radio_options
from aiotsim.network.topology import Topology

AnyNetwork = Network | Ns3Network


def build_network(
    env: simpy.Environment, topology: Topology, network: Any, seed: int, radios: dict[str, str] | None = None
) -> AnyNetwork:
    """The engine ``network`` (a scenario's ``[network]`` section) names, over ``topology``, keeping
    no list of transfer records (a run's trace keeps those it shows); ``radios``: each node's radio
    preset (the ns-3 engine runs a star all on 4G as an LTE cell)."""
    opts = transport_options(network)
    if network.engine == "ns3":
        cells = radio_options(network)
        return Ns3Network(env, topology, seed, opts["tcp"], keep_records=False, options=cells, radios=radios)
    return Network(env, topology, seed=seed, keep_records=False, **opts)


def finish_network(net: AnyNetwork) -> dict[str, Any] | None:
    """End ``net``: for the ns-3 engine its measurements (``Ns3Network.facts``), then its worker
    ended; None for the flow engine, or when the worker failed (the run's own error says why)."""
    if not isinstance(net, Ns3Network):
        return None
    try:
        return net.facts()
    except AiotsimError:
        return None
    finally:
        net.close()
