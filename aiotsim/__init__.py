"""aiotsim: a network-emulated AIoT edge simulator for communication-efficient distributed training.

The learning is real (PyTorch gradients on real data, real codecs producing real packed bytes) and
the network is simulated (SimPy discrete events over modeled links). See DESIGN.md for the contracts.
"""

__version__ = "0.1.0"
