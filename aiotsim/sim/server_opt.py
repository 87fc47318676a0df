"""Server optimizers of federated rounds: how the averaged model delta moves the global model.

The nodes upload ``d_i = x - x_i`` (global model minus the node's model after its local steps: a
pseudo-gradient, descended like a gradient), and the server averages them, weighted by samples,
into ``d``. Following Reddi et al., *Adaptive Federated Optimization* (ICLR 2021), Algorithm 2
(their ``Delta = -d``), with server learning rate ``eta``:

``avg`` (FedAvg, McMahan et al. 2017)
    ``x <- x - eta d``; with ``eta = 1`` the new model is the weighted average of the nodes' models.
``momentum`` (FedAvgM, Hsu et al. 2019)
    ``v <- beta1 v + d``, ``x <- x - eta v``.
``adam`` (FedAdam)
    ``m <- beta1 m + (1 - beta1) d``, ``v <- beta2 v + (1 - beta2) d^2``,
    ``x <- x - eta m / (sqrt(v) + tau)``; no bias correction, as in the paper. Their defaults:
    ``beta1 = 0.9``, ``beta2 = 0.99``, ``tau = 1e-3`` (tau is the adaptivity; they tune ``eta``
    and ``tau`` per task, typically ``eta`` in 1e-3 .. 1e-1 for Adam).

Plugins (:mod:`aiotsim.plugins`): ``training.server_optimizer = "package.module:Name"`` or the name
of an entry point of the group ``aiotsim.server_optimizers``. The class must subclass
:class:`ServerOptimizer`; it is constructed with the same arguments as the built-ins (``kind`` is
its own name) and overrides :meth:`ServerOptimizer.step`. Its state between rounds must live in
``self.m`` and ``self.v`` (``None`` or one tensor per layer, parameter shapes): checkpoints save and
restore exactly those two.
"""

from __future__ import annotations

from typing import Any, cast

import torch

from aiotsim import plugins

KINDS = plugins.SERVER_OPTIMIZER_BUILTINS  # ("avg", "momentum", "adam")


class ServerOptimizer:
    """Applies averaged pseudo-gradients to the global parameters in place.

    ``ServerOptimizer(params, kind, ...)`` with a plugin's name as ``kind`` constructs that plugin
    class (a subclass) with the same arguments, so the federated strategy builds either alike.

    Parameters
    ----------
    params : list of torch.Tensor
        The global model's parameters (updated in place, without autograd).
    kind : {"avg", "momentum", "adam"} or a plugin's name
        The rule (see the module docstring).
    lr : float
        Server learning rate ``eta`` (> 0).
    beta1, beta2, tau : float
        Momentum / first-moment decay, second-moment decay, adaptivity.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> ServerOptimizer:
        # A plugin's name as ``kind`` picks its class; Python then runs that class's __init__ (a
        # subclass). No arguments (copy, pickle): the class itself.
        kind = args[1] if len(args) > 1 else kwargs.get("kind")
        plugin = cls is ServerOptimizer and isinstance(kind, str) and kind not in KINDS
        return super().__new__(server_optimizer_class(kind) if plugin else cls)

    def __init__(
        self, params: list[torch.Tensor], kind: str, lr: float, beta1: float = 0.9, beta2: float = 0.99,
        tau: float = 1e-3,
    ) -> None:  # fmt: skip
        if kind not in KINDS and type(self) is ServerOptimizer:
            raise ValueError(f"kind(={kind!r}) must be one of {', '.join(KINDS)}")
        self.params, self.kind, self.lr = params, kind, lr
        self.beta1, self.beta2, self.tau = beta1, beta2, tau
        self.m: list[torch.Tensor] | None = None  # momentum / first moment, per layer
        self.v: list[torch.Tensor] | None = None  # FedAdam second moment, per layer

    @torch.no_grad()
    def step(self, d: list[torch.Tensor]) -> None:
        """One server step with the averaged pseudo-gradient ``d`` (per layer, parameter shapes)."""
        d = [g.to(p.dtype) for p, g in zip(self.params, d)]
        if self.kind == "avg":
            torch._foreach_add_(self.params, d, alpha=-self.lr)
            return
        if self.m is None:
            self.m = [torch.zeros_like(p) for p in self.params]
        if self.kind == "momentum":
            torch._foreach_mul_(self.m, self.beta1)
            torch._foreach_add_(self.m, d)
            torch._foreach_add_(self.params, self.m, alpha=-self.lr)
            return
        if self.v is None:
            self.v = [torch.zeros_like(p) for p in self.params]
        torch._foreach_lerp_(self.m, d, 1.0 - self.beta1)  # m + (1 - b1)(d - m)
        torch._foreach_mul_(self.v, self.beta2)
        torch._foreach_addcmul_(self.v, d, d, value=1.0 - self.beta2)
        denom = torch._foreach_add(torch._foreach_sqrt(self.v), self.tau)
        torch._foreach_addcdiv_(self.params, self.m, denom, value=-self.lr)


def server_optimizer_plugin(name: str) -> plugins.Plugin:
    """The class of ``name`` and its origin (``"built-in"``, ``"entry point <dist>"`` or
    ``"module path"``).

    Raises
    ------
    ConfigError
        An unknown name (did-you-mean, the valid names), or a plugin that cannot be imported or
        does not subclass :class:`ServerOptimizer`.
    """
    if name in KINDS:
        return plugins.Plugin(name, ServerOptimizer, "built-in")
    return plugins.find(name, plugins.SERVER_OPTIMIZER_GROUP, ServerOptimizer, "server optimizer", KINDS)


def server_optimizer_class(name: str) -> type[ServerOptimizer]:
    """The class of the server optimizer ``name``; raises as :func:`server_optimizer_plugin`."""
    return cast(type[ServerOptimizer], server_optimizer_plugin(name).cls)  # checked when loaded


__all__ = ["ServerOptimizer", "KINDS", "server_optimizer_class", "server_optimizer_plugin"]
