"""Real learning for the simulator: data sets, partitions, models, gradients and compute time.

Nothing in this package imports simpy: it knows tensors, FLOPs and seconds of computation, and the
engine (``aiotsim.sim``) turns those seconds into simulated time.
"""

from aiotsim.learn.compute import BatchStream, ComputeModel, GradientComputer, GradResult
from aiotsim.learn.datasets import DATASETS, Dataset, SyntheticSpec, load_dataset
from aiotsim.learn.devices import PROFILES, DeviceProfile, get_profile, resolve_device
from aiotsim.learn.models import MODELS, build_model, layer_infos
from aiotsim.learn.partition import SCHEMES, partition

__all__ = [
    "DATASETS",
    "MODELS",
    "PROFILES",
    "SCHEMES",
    "BatchStream",
    "ComputeModel",
    "Dataset",
    "DeviceProfile",
    "GradResult",
    "GradientComputer",
    "SyntheticSpec",
    "build_model",
    "get_profile",
    "layer_infos",
    "load_dataset",
    "partition",
    "resolve_device",
]
