"""Devices: the simulated hardware profiles a node's compute time is scaled to, and the torch
device the real learning runs on (``auto``, ``cpu``, ``cuda[:N]``, full fp32 on CUDA).

Profiles are calibrated against a reference host (the 2-core CPU this project is developed on);
see :data:`PROFILES` for every figure and its source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from aiotsim.errors import ConfigError

# ---------------------------------------------------------------------------------------------
# Device profiles
# ---------------------------------------------------------------------------------------------

# Reference host, measured on the development machine (2 vCPUs of an AMD EPYC, torch 2.13 CPU,
# torch.set_num_threads(2)):
#   - LeNet-5 on 28x28, batch 32, forward + backward: 72,445,440 FLOP (FlopCounterMode) in
#     3.17 ms -> 22.8 GFLOP/s sustained training throughput;
#   - 1024x1024 fp32 matmul: 190 GFLOP/s.
HOST_TRAIN_FLOPS: float = 22.8e9  # FLOP/s, small-CNN training, measured
HOST_SGEMM_FLOPS: float = 190e9  # FLOP/s, large fp32 matmul, measured
# Small models at small batch sizes reach only a fraction of a device's dense-matmul throughput
# (kernel launch and memory bound). We assume every device reaches the fraction the host does.
SMALL_MODEL_EFFICIENCY: float = HOST_TRAIN_FLOPS / HOST_SGEMM_FLOPS  # = 0.12

# Raspberry Pi 4 Model B (4x Cortex-A72 @ 1.5 GHz):
#   - HPL (fp64) ~8 GFLOP/s on 64-bit Raspberry Pi OS (B. Feiereisen, "Benchmarking the Raspberry
#     Pi 4 with Raspberry Pi OS64", 2022, feiereisen.net); NEON holds twice as many fp32 as fp64
#     lanes, so dense fp32 throughput is taken as 2 x 8 = 16 GFLOP/s.
#   - Power at 5.1 V: idle 540 mA = 2.7 W, `stress --cpu 4` 1280 mA = 6.4 W (RasPi.TV, "How much
#     power does Pi4B use?", 2019).
RPI4_SGEMM_FLOPS: float = 2 * 8e9  # FLOP/s, fp32 dense estimate (derivation above)

# NVIDIA Jetson Nano (128-core Maxwell GPU @ 921.6 MHz, 4x Cortex-A57):
#   - fp32 peak = 128 cores x 2 FLOP/FMA x 921.6 MHz = 236 GFLOP/s (NVIDIA's module data sheet
#     gives 472 GFLOPS for fp16, twice the fp32 rate).
#   - Power: the 10 W MAXN nvpmodel budget while training (NVIDIA L4T power-mode table: MAXN = 10 W,
#     mode 1 = 5 W); idle 1.9 W module estimate (CPU 1.0 + GPU 0.5 + DRAM 0.3 + eMMC 0.1 W, a
#     published per-component Nano power budget), an estimate, not a measurement.
JETSON_NANO_PEAK_FLOPS: float = 128 * 2 * 921.6e6  # FLOP/s = 235.9 GFLOP/s


@dataclass(frozen=True)
class DeviceProfile:
    """Compute speed and power of a simulated device.

    Attributes
    ----------
    name : str
        Profile name (key in :data:`PROFILES`).
    flops_per_s : float
        Sustained training throughput, FLOP/s (``flops`` compute model).
    measured_scale : float
        Multiplier on the reference host's measured wall time (``measured`` compute model):
        ``HOST_TRAIN_FLOPS / flops_per_s``.
    power_active_w : float
        Power while computing, W.
    power_idle_w : float
        Power while idle (waiting for the network), W.
    description : str
        One line for listings.
    """

    name: str
    flops_per_s: float
    measured_scale: float
    power_active_w: float
    power_idle_w: float
    description: str

    def __post_init__(self) -> None:
        for field_name in ("flops_per_s", "measured_scale", "power_active_w"):
            value = getattr(self, field_name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"profile {self.name!r}: {field_name}(={value}) must be > 0")
        if not (math.isfinite(self.power_idle_w) and 0 <= self.power_idle_w <= self.power_active_w):
            raise ConfigError(
                f"profile {self.name!r}: power_idle_w(={self.power_idle_w}) must be in [0, power_active_w]"
            )


def _profile(name: str, flops_per_s: float, active_w: float, idle_w: float, description: str) -> DeviceProfile:
    return DeviceProfile(name, flops_per_s, HOST_TRAIN_FLOPS / flops_per_s, active_w, idle_w, description)


PROFILES: dict[str, DeviceProfile] = {
    # 16 GFLOP/s x 0.12 = 1.92 GFLOP/s; 6.4 W under 4-core load, 2.7 W idle (sources above).
    "rpi4": _profile(
        "rpi4",
        SMALL_MODEL_EFFICIENCY * RPI4_SGEMM_FLOPS,
        6.4,
        2.7,
        "Raspberry Pi 4-class sensor node (4x Cortex-A72 @ 1.5 GHz, CPU training)",
    ),
    # 235.9 GFLOP/s x 0.12 = 28.3 GFLOP/s; 10 W MAXN budget, 1.9 W idle estimate (sources above).
    "jetson-nano": _profile(
        "jetson-nano",
        SMALL_MODEL_EFFICIENCY * JETSON_NANO_PEAK_FLOPS,
        10.0,
        1.9,
        "Jetson Nano-class edge board (128-core Maxwell GPU, 10 W mode)",
    ),
    # This machine: measured_scale 1. Power: 2 vCPUs' share of a 64-core, 280 W EPYC socket
    # (2 x 280 / 64 = 8.75 W) while computing; idle taken as 20% of that (1.75 W): estimates.
    "host": _profile(
        "host",
        HOST_TRAIN_FLOPS,
        2 * 280.0 / 64,
        0.2 * 2 * 280.0 / 64,
        "the reference host itself (2 vCPUs, measured)",
    ),
}


def get_profile(name: str) -> DeviceProfile:
    """Look up a device profile by name.

    Raises
    ------
    ConfigError
        Unknown name; the message lists the valid ones.
    """
    try:
        return PROFILES[name]
    except KeyError:
        raise ConfigError(f"unknown device profile {name!r}; valid names: {', '.join(PROFILES)}") from None


# ---------------------------------------------------------------------------------------------
# Devices
# ---------------------------------------------------------------------------------------------


def resolve_device(name: str) -> torch.device:
    """Map a device option to a :class:`torch.device`.

    Parameters
    ----------
    name : str
        ``"auto"`` (CUDA when available, else CPU), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.

    Raises
    ------
    ConfigError
        CUDA asked for but unavailable, an index beyond the visible GPUs, or an unknown name.
    """
    key = name.strip().lower()
    if key == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if key == "cpu":
        return torch.device("cpu")
    if key == "cuda" or key.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise ConfigError(
                f"device {name!r} requested, but CUDA is not available (torch {torch.__version__}"
                f"{' is a CPU-only build' if torch.version.cuda is None else ' sees no GPU'}); "
                "use device 'cpu' or 'auto'"
            )
        index = key.partition(":")[2]
        if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
            raise ConfigError(f"device {name!r}: {torch.cuda.device_count()} CUDA device(s) visible")
        return torch.device(key)
    raise ConfigError(f"unknown device {name!r}; valid: auto, cpu, cuda, cuda:N")


def full_fp32_on_cuda() -> None:
    """Compute in full fp32 on CUDA, as on the CPU: no TF32. cuDNN uses TF32 for convolutions by
    default on Ampere and later GPUs (``torch.backends.cudnn.allow_tf32``), rounding their inputs
    to 10 mantissa bits (about 1e-3 relative per product); through ResNet-20's 20 convolutions and
    batch norms a node's gradients then moved by up to 4% from the CPU's (H100, issue 45's checks).
    aiotsim's gradients are the experiment's data, so every node's must be the model's own, on any
    device. Process-wide (torch has no per-module switch); matmuls' TF32 is off by default and
    stays off."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False


def sync(device: torch.device) -> None:
    """Wait for ``device``'s queued work (CUDA), so that wall-clock timings cover it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
