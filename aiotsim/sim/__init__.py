"""The simulation core: real learning on a simulated network, in SimPy.

``world.py``       :class:`~aiotsim.sim.world.Cluster`, built from a scenario: nodes, gateways,
                   server, network, trace and accounting, behind a small interface
``learning.py``    what nodes and the server compute (gradient, encode, decode + aggregate, step),
                   returning values and wall-clock/FLOP costs; never touches simulated time
``observe.py``     what a node may learn of the server's step (codecs that observe it: agg-aware)
``processes.py``   the SimPy processes of a round: node, gateway, downlink hops
``strategies/``    how a run orders its rounds (sync, partial, async, ring), a registry by name
``runner.py``      one run from the first dispatch to the summary, records into a ``RunSink``
``checkpoint.py``  a run's state at a quiescent point, written atomically; resume from it
``accounting.py``  traffic windows, totals, the summary, the ``RunSink`` protocol
``stops.py``       runs that end early on their own: diverged, stalled
``topologies.py``  node layout and network topology; ``energy.py``, ``trace.py``

Nothing here imports :mod:`aiotsim.results` or the CLI: :func:`aiotsim.api.run_scenario` joins a
cluster to the run-directory writer.
"""
