"""The server side of the codec contract: how the server combines the decoded gradients of a layer,
at once (:meth:`ServerAggregation.aggregate`) or streamed as they arrive (``aggregate_start`` /
``aggregate_add`` / ``aggregate_finish``). Every :class:`~aiotsim.compress.base.Codec` inherits it;
the default is the (weighted) mean, in float64 sums when streamed, and a codec whose server combines
otherwise (signSGD's majority vote) overrides both forms."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from aiotsim.compress.layer import LayerInfo
from aiotsim.errors import CodecError

# Values per message from which the CPU adds a batch of decoded rows into the float64 sum one row
# at a time instead of in one cumulative-sum scan (ServerAggregation.aggregate_add_rows): torch's cumsum along
# the messages is slow for long rows (67 LeNet-5 messages, CPU, one thread, ms per layer, scan /
# row by row: 48,000 values 28.9 / 0.88, 10,080 0.50 / 0.29, 2,400 0.13-1.0 / 0.18, 840 0.06 /
# 0.16, 6 0.02 / 0.14; AMD EPYC, torch 2.13). On a GPU the scan is one launch per layer.
CPU_SCAN_MAX_VALUES = 1024


@dataclass
class RunningAggregate:
    """A streamed aggregation's state for one layer (see :meth:`ServerAggregation.aggregate_start`)."""

    total: torch.Tensor  # float64, layer shape: the weighted sum (signSGD: the sum of the signs)
    weight: float = 0.0  # sum of the weights added
    count: int = 0  # messages added
    extra: torch.Tensor | None = None  # a codec's second sum (signSGD: the sum of |d|), float64


class ServerAggregation:
    """The aggregation methods of a codec (mixed into :class:`~aiotsim.compress.base.Codec`)."""

    def aggregate(self, decoded: list[torch.Tensor], layer: LayerInfo) -> torch.Tensor:
        """Combine the decoded gradients of the workers (default: their mean)."""
        if not decoded:
            raise CodecError(f"aggregate({layer.name}): no gradients to aggregate")
        return self.aggregate_stacked(torch.stack(decoded), layer)

    def aggregate_stacked(self, stacked: torch.Tensor, layer: LayerInfo) -> torch.Tensor:
        """The default :meth:`aggregate` of gradients already stacked, ``[workers, *shape]``: their
        mean over dim 0. The server's stacked form decodes the messages straight into the rows of
        a reused stack and calls this (a codec that overrides :meth:`aggregate` is given the
        list instead)."""
        return stacked.mean(dim=0)

    # The streamed form of :meth:`aggregate`: the same combination folded one message at a time
    # into a per-layer accumulator (O(model) memory, however many messages). A codec that
    # overrides ``aggregate`` overrides these three too (:meth:`streams_aggregate` tells).
    def aggregate_start(self, layer: LayerInfo, device: torch.device) -> RunningAggregate:
        """An empty accumulator for ``layer`` (float64 sums: the result is, to float32 precision,
        independent of the order the messages are added in)."""
        return RunningAggregate(torch.zeros(layer.shape, dtype=torch.float64, device=device))

    def aggregate_add(self, acc: RunningAggregate, decoded: torch.Tensor, weight: float = 1.0) -> None:
        """Add one decoded gradient with ``weight`` (its node count) to ``acc`` (in place)."""
        # in place into the float64 sum: the add computes in float64 (its dtype), the same values as
        # adding decoded.to(float64), without a model-sized float64 copy per message
        acc.total.add_(decoded, alpha=weight)
        acc.weight += weight
        acc.count += 1

    def aggregate_add_rows(self, acc: RunningAggregate, rows: torch.Tensor, weights: Sequence[float]) -> None:
        """:meth:`aggregate_add` of ``rows[i]`` with ``weights[i]``, in order (``rows``: decoded
        gradients, ``[messages, *shape]``).

        For the mean's own sum with whole weights (node or sample counts below 2**29, so each
        ``weight x value`` is exact in float64), one in-place ``cumsum`` over ``[sum; weighted
        rows]`` in float64: a sequential scan along the messages, each partial sum rounded as the
        in-place adds round it (the same bits on the CPU), in a few operations instead of one per
        message (on a GPU, one launch per message and layer). Otherwise, for a codec with its own
        :meth:`aggregate_add` or a sum that is not float64, and on the CPU for rows of at least
        :data:`CPU_SCAN_MAX_VALUES` values (where the scan is slower), message by message.
        """
        whole = all(float(w).is_integer() and 0 <= w < 2**29 for w in weights)
        own = type(self).aggregate_add is not ServerAggregation.aggregate_add or acc.total.dtype != torch.float64
        long = len(weights) > 1 and rows.device.type == "cpu" and rows[0].numel() >= CPU_SCAN_MAX_VALUES
        if own or not whole or len(weights) < 2 or long:
            for row, w in zip(rows, weights):
                self.aggregate_add(acc, row, w)
            return
        scan = torch.empty((len(weights) + 1, *acc.total.shape), dtype=torch.float64, device=acc.total.device)
        scan[0].copy_(acc.total)
        w = torch.tensor(weights, dtype=torch.float64, device=rows.device).view(-1, *[1] * (rows.dim() - 1))
        torch.mul(rows, w, out=scan[1:])  # exact: a float32 value times a whole number below 2**29
        acc.total.copy_(scan.cumsum_(dim=0)[-1])
        for weight in weights:  # the Python float as aggregate_add accumulates it
            acc.weight += weight
        acc.count += len(weights)

    def aggregate_finish(self, acc: RunningAggregate, layer: LayerInfo) -> torch.Tensor:
        """The aggregate of everything added (default: the weighted mean), as ``layer.dtype``."""
        if not acc.count:
            raise CodecError(f"aggregate({layer.name}): no gradients to aggregate")
        return (acc.total / acc.weight).to(layer.dtype)

    @classmethod
    def streams_aggregate(cls) -> bool:
        """Whether the streamed form matches :meth:`aggregate`: the mean's own, or a codec that
        overrides both (a custom ``aggregate`` alone would be streamed as a mean: refused)."""
        return cls.aggregate is ServerAggregation.aggregate or (
            cls.aggregate_add is not ServerAggregation.aggregate_add
            or cls.aggregate_finish is not ServerAggregation.aggregate_finish
        )

    @classmethod
    def supports_ring(cls) -> bool:
        """Whether a ring all-reduce can carry this codec: each hop decodes, adds its own
        gradient and re-encodes, which is only the codec's aggregation when that is a mean.
        Codecs that aggregate otherwise (signSGD's majority vote) cannot."""
        return cls.aggregate is ServerAggregation.aggregate
