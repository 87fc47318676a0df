"""Write the synthetic cellular traces of this directory (Mahimahi format). Deterministic.

    python scenarios/traces/generate.py

The traces are SYNTHETIC (no measured data): a Markov-modulated Poisson process meant to look like
a busy LTE cell seen from one IoT modem. The link is in one of four quality states (mean rates
below, Mbit/s); a state lasts an exponential time of mean 2 s, then the next state is drawn
uniformly among the other three. Within a state, each ms gets a Poisson number of 1,500-byte
delivery opportunities with the state's mean (rate / 12 Mbit/s per packet-per-ms), written as one
line per opportunity with that ms's timestamp (mahimahi's format: the file loops, its period is
its last timestamp, here forced to PERIOD_MS by a last line).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

PERIOD_MS = 20_000  # 20 s loop
MEAN_STATE_S = 2.0
# (file, seed, state rates Mbit/s): uplink slower than downlink, as on cellular links. The seeds
# were picked (among 1..11) for means near the states' average, so neither file is all bad luck.
TRACES = (
    ("cellular.up", 1, (0.3, 1.0, 2.5, 4.0)),
    ("cellular.down", 103, (1.0, 4.0, 8.0, 12.0)),
)
MBPS_PER_PACKET_PER_MS = 1500 * 8 * 1e3 / 1e6  # 12 Mbit/s = one 1,500-byte packet per ms


def trace_lines(seed: int, rates_mbps: tuple[float, ...]) -> list[str]:
    """Timestamps (ms) of the delivery opportunities of one period, one string per packet."""
    rng = np.random.default_rng(seed)
    per_ms = np.empty(PERIOD_MS)  # mean packets in each ms
    t, state = 0, int(rng.integers(len(rates_mbps)))
    while t < PERIOD_MS:
        length = max(1, int(rng.exponential(MEAN_STATE_S) * 1e3))
        per_ms[t : t + length] = rates_mbps[state] / MBPS_PER_PACKET_PER_MS
        t += length
        state = int(rng.choice([s for s in range(len(rates_mbps)) if s != state]))
    counts = rng.poisson(per_ms)  # [ms] packets
    stamps = np.repeat(np.arange(1, PERIOD_MS + 1), counts[:PERIOD_MS])  # ms 1..PERIOD_MS
    if stamps.size == 0 or stamps[-1] != PERIOD_MS:
        stamps = np.append(stamps, PERIOD_MS)  # the period is the last timestamp
    return [str(int(s)) for s in stamps]


def main() -> None:
    here = Path(__file__).resolve().parent
    for name, seed, rates in TRACES:
        lines = trace_lines(seed, rates)
        (here / name).write_text("\n".join(lines) + "\n")
        print(f"{name}: {len(lines)} packets in {PERIOD_MS} ms = {len(lines) * 12 / PERIOD_MS:.3f} Mbit/s mean")


if __name__ == "__main__":
    main()
