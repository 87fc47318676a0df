"""The timing record of a run: every learning value the clock depends on, in the order it was used.

A run's simulated time depends on its learning only through a few numbers per event: a node's
training loss and compute cost, the bytes and codec cost of each message, the server's decode cost
and update size, the evaluations. A :class:`Tape` sits where the simulation reads those numbers
(:mod:`aiotsim.sim.world`, :mod:`aiotsim.sim.processes`, the strategies). Recording, it passes them
through and keeps a copy; replaying, it hands back the recorded value instead of the (absent)
learning's, so the same strategy code re-simulates the clock under new network settings without a
model (:mod:`aiotsim.replaying`).

Values are kept per *stream* and *owner* (a node, a gateway, the server), in call order. Within
one owner the order of calls is fixed by the strategy (a node computes, then encodes, iteration
after iteration), whatever the network does, so a replay asks each owner for its values in the
order they were recorded even when owners interleave differently.

=========  =======  ==================================================  ======================
stream     owner    columns                                             when
=========  =======  ==================================================  ======================
gradient   node     loss, wall_s, flops                                 each gradient (local
                                                                        training: a round's)
encode     node     nbytes, wall_s (encode + momentum masking)          each upload
gateway    gateway  agg_wall_s, enc_wall_s, nbytes                      each gateway forward
decode     0        agg_wall_s                                          each server aggregation
update     0        nbytes (downlink update), agg_nnz, agg_bytes        each server step
evaluate   0        accuracy, loss                                      each evaluation
hop        node     nbytes, wall_s                                      each ring hop message
arrival    agg.     key (first node of the upload)                      streamed aggregations
=========  =======  ==================================================  ======================

On disk it is ``timing.npz`` (numpy's zip of arrays, read with ``allow_pickle=False``: it cannot
run code) holding ``<stream>.owner`` and ``<stream>.<column>`` arrays and a JSON ``meta`` string
(the run's constants: parameter count, model bytes, FLOPs per batch, device, ...). A synchronous
node-iteration costs 56 bytes before compression (gradient row 32, encode row 24, owners included).
"""

from __future__ import annotations

import json
import math
import zipfile
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from aiotsim.errors import ConfigError, ResultsError

TIMING_NAME = "timing.npz"
REPLAY_NAME = "replay.json"  # in a replayed run directory: where its learning came from
FORMAT = 1
MAX_RECORD_BYTES = 8 * 2**30  # uncompressed arrays of a record at most (10,000 nodes x 1,000 iterations: 0.5 GB)
SERVER = 0  # owner of the server's streams
# stream -> columns (name, array typecode: "d" float64, "q" int64)
STREAMS: dict[str, tuple[tuple[str, str], ...]] = {
    "gradient": (("loss", "d"), ("wall_s", "d"), ("flops", "d")),
    "encode": (("nbytes", "q"), ("wall_s", "d")),
    "gateway": (("agg_wall_s", "d"), ("enc_wall_s", "d"), ("nbytes", "q")),
    "decode": (("agg_wall_s", "d"),),
    "update": (("nbytes", "q"), ("agg_nnz", "q"), ("agg_bytes", "q")),
    "evaluate": (("accuracy", "d"), ("loss", "d")),
    "hop": (("nbytes", "q"), ("wall_s", "d")),
    "arrival": (("key", "q"),),
}
META_KEYS = (
    "learning_key",
    "device",
    "model",
    "dataset",
    "elements",
    "dense_model_bytes",
    "flops_per_batch",
    "encode_flops_per_element",
    "aggregation_mode",
    "shard_sizes",
)


class _Stream:
    """One stream's columns: appended while recording, read per owner while replaying."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.columns = STREAMS[name]
        self.owner = array("q")
        self.values = [array(code) for _, code in self.columns]
        self._rows: dict[int, list[tuple[Any, ...]]] | None = None  # replay: owner -> rows
        self._next: dict[int, int] = {}

    def append(self, owner: int, values: Sequence[Any]) -> None:
        self.owner.append(owner)
        for col, v in zip(self.values, values):
            col.append(v)

    def index(self) -> None:
        """Replay: the rows of every owner, in recorded order, as Python values."""
        rows: dict[int, list[tuple[Any, ...]]] = {}
        cols = [c.tolist() for c in self.values]
        for k, owner in enumerate(self.owner.tolist()):
            rows.setdefault(owner, []).append(tuple(c[k] for c in cols))
        self._rows, self._next = rows, dict.fromkeys(rows, 0)

    def take(self, owner: int) -> tuple[Any, ...]:
        assert self._rows is not None
        rows, k = self._rows.get(owner), self._next.get(owner, 0)
        if rows is None or k >= len(rows):
            raise ResultsError(
                f"{TIMING_NAME}: the replay asked for {self.name} value {k + 1} of owner {owner}, which the "
                "record does not hold: the record does not belong to this run (or the run changed); rerun it"
            )
        self._next[owner] = k + 1
        return rows[k]

    def left(self) -> int:
        """Replay: recorded rows not asked for."""
        assert self._rows is not None
        return sum(len(r) - self._next[o] for o, r in self._rows.items())


class Tape:
    """A run's timing record (see the module docstring): recording by default.

    Parameters
    ----------
    meta : dict, optional
        The recorded run's constants (:data:`META_KEYS`), when replaying.
    """

    def __init__(self) -> None:
        self.streams = {name: _Stream(name) for name in STREAMS}
        self.replaying = False
        self.meta: dict[str, Any] = {}

    # ---- the points where the simulation reads a learning value ------------------------------
    def _pass(self, stream: str, owner: int, values: tuple[Any, ...]) -> tuple[Any, ...]:
        s = self.streams[stream]
        if self.replaying:
            return s.take(owner)
        s.append(owner, values)
        return values

    def gradient(self, node: int, loss: float, wall_s: float, flops: float) -> tuple[float, float, float]:
        """A node's gradient (or round of local training): ``(loss, host s, FLOPs)``."""
        return self._pass("gradient", node, (loss, wall_s, flops))  # type: ignore[return-value]

    def encode(self, node: int, nbytes: int, wall_s: float) -> tuple[int, float]:
        """A node's upload: ``(payload bytes, host s of encoding and masking)``."""
        return self._pass("encode", node, (nbytes, wall_s))  # type: ignore[return-value]

    def gateway(self, gateway: int, agg_wall_s: float, enc_wall_s: float, nbytes: int) -> tuple[float, float, int]:
        """A gateway's forward: ``(host s aggregating, host s re-encoding, bytes forwarded)``."""
        return self._pass("gateway", gateway, (agg_wall_s, enc_wall_s, nbytes))  # type: ignore[return-value]

    def decode(self, agg_wall_s: float) -> float:
        """A server aggregation: host s decoding and aggregating."""
        return self._pass("decode", SERVER, (agg_wall_s,))[0]  # type: ignore[no-any-return]

    def update(self, nbytes: int, agg_nnz: int, agg_bytes: int) -> tuple[int, int, int]:
        """A server step: ``(update download bytes, non-zeros, bytes of the aggregate as sparse
        messages)``."""
        return self._pass("update", SERVER, (nbytes, agg_nnz, agg_bytes))  # type: ignore[return-value]

    def evaluate(self, accuracy: float, loss: float) -> tuple[float, float]:
        """An evaluation of the global model: ``(accuracy, loss)``."""
        return self._pass("evaluate", SERVER, (accuracy, loss))  # type: ignore[return-value]

    def hop(self, node: int, nbytes: int, wall_s: float) -> tuple[int, float]:
        """A ring hop's message from ``node``: ``(bytes, host s encoding)``."""
        return self._pass("hop", node, (nbytes, wall_s))  # type: ignore[return-value]

    def arrival(self, aggregator: int, key: int) -> None:
        """An upload (first node ``key``) reaching a streamed aggregation at ``aggregator`` (-1:
        the server, k: gateway k). Replaying, a different order is refused: streamed float64 sums
        are added in arrival order, so the learning would not be the recorded one."""
        (recorded,) = self._pass("arrival", aggregator, (key,))
        if recorded != key:
            where = "the server" if aggregator < 0 else f"gateway {aggregator}"
            raise ConfigError(
                f"replay: with these settings the uploads reach {where} in another order (node {key} "
                f"before node {recorded}), and training.aggregation = 'streamed' adds them in arrival "
                "order, so what is learned would change in the last bits; run the scenario in full "
                "(aiotsim run), or record the run with training.aggregation = 'stacked'"
            )

    # ---- checkpoints --------------------------------------------------------------------------
    def state(self) -> dict[str, dict[str, np.ndarray]]:
        """The record so far as plain arrays (``{stream: {"owner": ..., column: ...}}``), for a
        checkpoint: a resumed run goes on recording where it stopped."""
        return {name: self._arrays(s) for name, s in self.streams.items()}

    def restore(self, state: dict[str, dict[str, np.ndarray]]) -> None:
        """Go on recording after :meth:`state` (checked by :func:`state_problems` first)."""
        for name, s in self.streams.items():
            s.owner = array("q", state[name]["owner"].tolist())
            s.values = [array(code, state[name][col].tolist()) for col, code in s.columns]

    @staticmethod
    def _arrays(s: _Stream) -> dict[str, np.ndarray]:
        out = {"owner": np.array(s.owner, dtype=np.int64)}
        for (col, code), values in zip(s.columns, s.values):
            out[col] = np.array(values, dtype=np.float64 if code == "d" else np.int64)
        return out

    # ---- files --------------------------------------------------------------------------------
    def save(self, path: str | Path, meta: dict[str, Any]) -> None:
        """Write the record and ``meta`` (the run's constants) to ``path`` (``timing.npz``)."""
        arrays: dict[str, np.ndarray] = {"meta": np.array(json.dumps({"format": FORMAT, **meta}, sort_keys=True))}
        for name, s in self.streams.items():
            arrays.update({f"{name}.{col}": a for col, a in self._arrays(s).items()})
        with open(path, "wb") as f:
            np.savez_compressed(f, **arrays)

    @classmethod
    def load(cls, path: str | Path) -> Tape:
        """A replaying tape from ``path``. Only plain arrays are read (no pickles: nothing in the
        file can run code); shapes, types and sizes are checked.

        Raises
        ------
        ResultsError
            A missing, damaged or foreign file, named with the reason.
        """
        p = Path(path)
        if not p.is_file():
            raise ResultsError(
                f"{p}: no timing record; it is written by runs of aiotsim 0.x with timing replay: rerun the run"
            )
        try:
            with zipfile.ZipFile(p) as z:
                total = sum(i.file_size for i in z.infolist())
            if total > MAX_RECORD_BYTES:
                bound = MAX_RECORD_BYTES / 2**30
                raise ResultsError(f"{p}: {total / 2**30:.1f} GiB of arrays, over the {bound:g} GiB bound")
            with np.load(p, allow_pickle=False) as z:
                data = {k: z[k] for k in z.files}
        except ResultsError:
            raise
        except Exception as exc:  # zipfile.BadZipFile, ValueError (a pickled array), OSError
            why = f"{type(exc).__name__}: {exc}"
            raise ResultsError(f"{p}: not a readable timing record ({why}); rerun the run") from None
        tape = cls()
        tape.meta = _meta(p, data.get("meta"))
        for name, s in tape.streams.items():
            owner = _column(p, data, f"{name}.owner", np.int64, None)
            s.owner = array("q", owner.tolist())
            for k, (col, code) in enumerate(s.columns):
                values = _column(p, data, f"{name}.{col}", np.float64 if code == "d" else np.int64, len(owner))
                s.values[k] = array(code, values.tolist())
            s.index()
        tape.replaying = True
        return tape

    def check_used(self) -> None:
        """After a replay: every recorded value was asked for (else the record is not this run's)."""
        left = {name: s.left() for name, s in self.streams.items() if s.left()}
        if left:
            raise ResultsError(
                f"{TIMING_NAME}: the replay ended with recorded values never asked for ({left}): the record "
                "does not belong to this run; rerun it"
            )


def state_problems(state: object) -> list[str]:
    """What is wrong with a checkpoint's ``tape`` entry (:meth:`Tape.state`), as messages."""
    if not isinstance(state, dict) or set(state) != set(STREAMS):
        return [f"tape must hold the streams {', '.join(STREAMS)}"]
    out = []
    for name, columns in STREAMS.items():
        arrays, want = state[name], {"owner": np.int64} | {c: np.float64 if t == "d" else np.int64 for c, t in columns}
        if not isinstance(arrays, dict) or set(arrays) != set(want):
            out.append(f"tape.{name} must hold the arrays {', '.join(want)}")
            continue
        n = getattr(arrays["owner"], "shape", None)
        for col, dtype in want.items():
            a = arrays[col]
            if not (isinstance(a, np.ndarray) and a.dtype == dtype and a.ndim == 1 and a.shape == n):
                out.append(f"tape.{name}.{col} must be a 1-D {np.dtype(dtype).name} array as long as its owners")
    return out


def _column(p: Path, data: dict[str, np.ndarray], key: str, dtype: type, length: int | None) -> np.ndarray:
    a = data.get(key)
    if a is None or a.ndim != 1 or a.dtype != dtype or (length is not None and len(a) != length):
        raise ResultsError(f"{p}: array {key!r} is missing or malformed; rerun the run")
    if dtype is np.float64 and key.endswith(("wall_s", "flops")) and not np.all(np.isfinite(a) & (a >= 0)):
        raise ResultsError(f"{p}: array {key!r} holds negative or non-finite costs; rerun the run")
    if dtype is np.int64 and not key.endswith((".owner", ".key")) and a.size and int(a.min()) < 0:
        raise ResultsError(f"{p}: array {key!r} holds negative sizes; rerun the run")
    return a


def _meta(p: Path, raw: np.ndarray | None) -> dict[str, Any]:
    if raw is None or raw.ndim != 0 or raw.dtype.kind != "U":
        raise ResultsError(f"{p}: no meta record; rerun the run")
    try:
        meta = json.loads(str(raw))
    except ValueError:
        raise ResultsError(f"{p}: its meta record is not JSON; rerun the run") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ResultsError(f"{p}: timing record format {meta.get('format') if isinstance(meta, dict) else '?'}, "
                           f"this aiotsim reads format {FORMAT}; rerun the run")  # fmt: skip
    missing = [k for k in META_KEYS if k not in meta]
    if missing:
        raise ResultsError(f"{p}: its meta record lacks {', '.join(missing)}; rerun the run")
    for k in ("elements", "dense_model_bytes"):
        if not isinstance(meta[k], int) or meta[k] < 0:
            raise ResultsError(f"{p}: meta {k} must be a whole number >= 0; rerun the run")
    for k in ("flops_per_batch", "encode_flops_per_element"):
        if not isinstance(meta[k], (int, float)) or not math.isfinite(meta[k]) or meta[k] < 0:
            raise ResultsError(f"{p}: meta {k} must be a finite number >= 0; rerun the run")
    if not isinstance(meta["shard_sizes"], list) or not all(isinstance(x, int) for x in meta["shard_sizes"]):
        raise ResultsError(f"{p}: meta shard_sizes must be a list of whole numbers; rerun the run")
    return meta


__all__ = ["Tape", "TIMING_NAME", "REPLAY_NAME", "STREAMS", "META_KEYS", "state_problems"]
