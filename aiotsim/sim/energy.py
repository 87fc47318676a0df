"""Energy: what a node spends computing and talking.

A node's energy is its device profile's active power times its busy time (gradient computation
and encoding), plus its radio's energy per transmitted and per received bit times the wire bits it
sent and received, plus (optionally) its idle power for the rest of the simulated time:

    E_node = P_active * t_busy + e_tx * bits_tx + e_rx * bits_rx [+ P_idle * (T - t_busy)]   # J

Radio figures are energy per bit at the radio's nominal rate, derived from datasheet currents;
each carries its source. They are per-bit costs of the radio itself, independent of the simulated
link's bandwidth (a slower shared channel costs airtime, which the time terms already see).

Each radio also carries a typical link: application-level rates up and down (Mbit/s), one-way
latency (ms) and residual packet loss (after the link layer's own retransmissions), with their
source. With ``network.link_defaults = "radio"`` a node's link takes these unless its group sets
them (``scenarios/cellular.toml``).

Each radio also carries the drop-tail buffer typical of its sending side, ``queue_packets``, with
its source (``queue_source``): what the radio stack's transmit queue holds, in packets of 1,500
bytes (the scenarios' MTU, as :attr:`~aiotsim.network.link.Link.queue_packets` counts them). A
stack whose buffer is counted in smaller frames or in bytes is converted by bytes, rounded up, at
least 1 packet. ``link_defaults = "radio"`` takes it for a node's links unless its group sets
``queue_packets``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aiotsim.network.link import DEFAULT_QUEUE_PACKETS

NJ = 1e-9  # joules per nanojoule


@dataclass(frozen=True)
class RadioProfile:
    """Energy per bit of a radio, nJ/bit, with the figures it was derived from."""

    name: str
    tx_nj_per_bit: float
    rx_nj_per_bit: float
    description: str
    up_mbps: float = 10.0  # typical application-level uplink rate, Mbit/s
    down_mbps: float = 10.0  # downlink, Mbit/s
    latency_ms: float = 5.0  # one-way, ms
    loss: float = 0.0  # residual packet loss probability
    link_source: str = ""
    queue_packets: int = DEFAULT_QUEUE_PACKETS  # drop-tail buffer of the sending side, 1,500-byte packets
    queue_source: str = ""

    def __post_init__(self) -> None:
        for key in ("tx_nj_per_bit", "rx_nj_per_bit"):
            if getattr(self, key) < 0:
                raise ValueError(f"{key}(={getattr(self, key)}) must be >= 0")
        if self.queue_packets < 1:
            raise ValueError(f"queue_packets(={self.queue_packets}) must be >= 1")


# The cellular radios' sending buffer: the RLC transmission buffer of ns-3's LTE model
LTE_RLC_QUEUE = (
    "ns-3 LteRlcUm attribute MaxTxBufferSize default 10 * 1024 B (lte-rlc-um.cc): 10,240 B = 7 packets of "
    "1,500 B (rounded up); measured 3G/4G networks often buffer far more (bufferbloat: Jiang et al., IMC 2012)"
)

RADIOS: dict[str, RadioProfile] = {
    # ESP32 Series Datasheet (Espressif, v4.x), "RF Power-Consumption Specifications":
    # TX 802.11n MCS7 at 13 dBm: 190 mA; RX 802.11n: 100 mA; 3.3 V supply -> 0.627 W TX,
    # 0.33 W RX. At ~20 Mbit/s of application throughput (a typical ESP32 TCP figure):
    # 0.627 / 20e6 = 31.4 nJ/bit TX, 0.33 / 20e6 = 16.5 nJ/bit RX.
    "wifi": RadioProfile(
        "wifi",
        31.4,
        16.5,
        "802.11n (ESP32-class), 20 Mbit/s effective",
        20.0,
        20.0,
        2.0,
        0.001,
        "ESP32 iperf TCP ~20 Mbit/s (Espressif docs); WLAN RTT ~3-5 ms; residual loss after 802.11 MAC retries ~0.1%",
        queue_packets=32,
        queue_source="ESP-IDF Wi-Fi driver: CONFIG_ESP_WIFI_DYNAMIC_TX_BUFFER_NUM default 32 TX buffers, each a "
        "copy of one frame from lwIP (<= 1,500 B)",
    ),
    # TI CC2420 datasheet (SWRS041c): TX at 0 dBm 17.4 mA, RX 18.8 mA, 3.0 V (0.052 / 0.056 W),
    # 250 kbit/s -> 208.8 nJ/bit TX, 225.6 nJ/bit RX.
    "802.15.4": RadioProfile(
        "802.15.4",
        208.8,
        225.6,
        "IEEE 802.15.4 / Zigbee (CC2420-class), 250 kbit/s",
        0.1,
        0.1,
        10.0,
        0.01,
        "250 kbit/s PHY, ~100 kbit/s after CSMA/CA and 6LoWPAN framing; ~10 ms per hop with backoff; "
        "~1% residual loss (typical single-hop packet reception ratio 95-99%)",
        queue_packets=1,
        queue_source="Contiki-NG net/queuebuf.h: QUEUEBUF_NUM default 8 frames of <= 127 B (1,016 B; Silicon Labs "
        "Connect's EMBER_MAC_OUTGOING_QUEUE_SIZE also defaults to 8): under one 1,500-byte packet, so 1",
    ),
    # Semtech SX1276 datasheet (rev. 7): TX +20 dBm on PA_BOOST 120 mA, RX (LnaBoost off,
    # 125 kHz) 10.8 mA, 3.3 V (0.396 / 0.0356 W); LoRa SF7/BW125/CR4-5 bit rate 5,469 bit/s
    # -> 72,400 nJ/bit TX, 6,517 nJ/bit RX.
    "lora": RadioProfile(
        "lora",
        72_400.0,
        6_517.0,
        "LoRa (SX1276-class), SF7/125 kHz, 5.5 kbit/s",
        0.0055,
        0.0055,
        1000.0,
        0.01,
        "SF7/BW125 5,469 bit/s (SX1276 datasheet); LoRaWAN class A receive window 1 s after the uplink",
        queue_packets=1,
        queue_source="Semtech LoRaMac-node sends one uplink at a time (a request while the MAC is busy is refused "
        "with LORAMAC_STATUS_BUSY): one frame of <= 222 B at SF7/125 kHz, under one 1,500-byte packet, so 1",
    ),
    # Wired Ethernet NIC for gateways/servers: 100BASE-TX PHY ~0.25 W each way at 100 Mbit/s
    # (e.g. TI DP83848 datasheet: 264 mW typical at 3.3 V) -> 2.6 nJ/bit.
    "ethernet": RadioProfile(
        "ethernet",
        2.64,
        2.64,
        "100BASE-TX Ethernet PHY (DP83848-class)",
        100.0,
        100.0,
        0.1,
        0.0,
        "100BASE-TX line rate; switched LAN, sub-ms latency, no loss",
        queue_packets=1000,
        queue_source="Linux txqueuelen: DEFAULT_TX_QUEUE_LEN = 1000 packets (include/net/pkt_sched.h), set by "
        "ether_setup for every Ethernet device",
    ),
    # Cellular IoT and broadband. Energy per bit: LTE from Huang et al., "A close examination of
    # performance and power characteristics of 4G LTE networks", MobiSys 2012 (uplink power
    # 438.39 mW per Mbit/s + 1,288 mW, downlink 51.97 mW per Mbit/s + 1,288 mW): at 8 Mbit/s up
    # 4.80 W -> 600 nJ/bit, at 20 Mbit/s down 2.33 W -> 116 nJ/bit. LTE-M/NB-IoT from module
    # datasheet currents (u-blox SARA-R4 / Quectel BG96 class: TX at 23 dBm ~ 250 mA, RX ~ 60 mA at
    # 3.8 V): LTE-M 0.95 W / 375 kbit/s = 2,530 nJ/bit TX, 0.23 W / 300 kbit/s = 760 nJ/bit RX;
    # NB-IoT 0.95 W / 62.5 kbit/s = 15,200 nJ/bit TX, 0.23 W / 27.2 kbit/s = 8,380 nJ/bit RX.
    # 5G NR (sub-6 GHz): order of magnitude from Narayanan et al., "A variegated look at 5G in the
    # wild", SIGCOMM 2021 (handset ~ 4 W active): 4 W / 150 Mbit/s = 27 nJ/bit RX, 4 W / 30 Mbit/s
    # = 133 nJ/bit TX.
    "lte-m": RadioProfile(
        "lte-m",
        2_530.0,
        760.0,
        "LTE-M / Cat-M1 (3GPP Rel-13, half-duplex)",
        0.375,
        0.3,
        75.0,
        0.005,
        "3GPP Rel-13 Cat-M1 HD-FDD peak 375 kbit/s up, 300 kbit/s down; field RTTs 100-200 ms "
        "(GSMA LTE-M deployment guide); ~0.5% residual loss after HARQ/RLC",
        queue_packets=7,
        queue_source=LTE_RLC_QUEUE,
    ),
    "nb-iot": RadioProfile(
        "nb-iot",
        15_200.0,
        8_380.0,
        "NB-IoT / Cat-NB1 (3GPP Rel-13)",
        0.0625,
        0.0272,
        800.0,
        0.01,
        "3GPP Rel-13 Cat-NB1 multi-tone peak 62.5 kbit/s up, 27.2 kbit/s down; 3GPP TR 45.820 latency "
        "target < 10 s, field RTTs 1-3 s; ~1% residual loss",
        queue_packets=7,
        queue_source=LTE_RLC_QUEUE,
    ),
    "4g": RadioProfile(
        "4g",
        600.0,
        116.0,
        "LTE Cat-4 (4G)",
        8.0,
        20.0,
        25.0,
        0.001,
        "typical LTE throughput 20 Mbit/s down, 8 Mbit/s up and RTT ~50 ms (Huang et al. MobiSys 2012; "
        "OpenSignal reports); ~0.1% residual loss",
        queue_packets=7,
        queue_source=LTE_RLC_QUEUE,
    ),
    "5g": RadioProfile(
        "5g",
        133.0,
        27.0,
        "5G NR sub-6 GHz",
        30.0,
        150.0,
        10.0,
        0.0005,
        "typical NR sub-6 throughput 150 Mbit/s down, 30 up, RTT ~20 ms (Narayanan et al. SIGCOMM 2021); "
        "~0.05% residual loss",
        queue_packets=7,
        queue_source="assumed as LTE's: ns-3's 5G-LENA (nr module) reuses the LTE module's RLC and its default; "
        + LTE_RLC_QUEUE,
    ),
}


def get_radio(name: str) -> RadioProfile:
    """The radio profile ``name``; a miss lists the valid ones."""
    from aiotsim.compress.registry import unknown_name_message
    from aiotsim.errors import ConfigError

    if name not in RADIOS:
        raise ConfigError(unknown_name_message("radio profile", name, sorted(RADIOS)))
    return RADIOS[name]


@dataclass
class EnergyMeter:
    """Per-node energy account, in joules."""

    active_w: float
    idle_w: float
    radio: RadioProfile
    compute_j: float = 0.0
    tx_j: float = 0.0
    rx_j: float = 0.0
    idle_j: float = 0.0
    busy_s: float = 0.0
    log: list[float] = field(default_factory=list)

    def busy(self, seconds: float) -> float:
        """Charge ``seconds`` of computation at the active power; returns the joules charged."""
        self.busy_s += seconds
        j = self.active_w * seconds
        self.compute_j += j
        return j

    def sent(self, wire_bytes: float) -> float:
        """Charge transmitting ``wire_bytes``; returns the joules charged."""
        j = wire_bytes * 8 * self.radio.tx_nj_per_bit * NJ
        self.tx_j += j
        return j

    def received(self, wire_bytes: float) -> float:
        """Charge receiving ``wire_bytes``; returns the joules charged."""
        j = wire_bytes * 8 * self.radio.rx_nj_per_bit * NJ
        self.rx_j += j
        return j

    def close(self, total_s: float, include_idle: bool) -> None:
        """At the end of the run: idle power for the time not spent busy (if asked)."""
        self.idle_j = self.idle_w * max(total_s - self.busy_s, 0.0) if include_idle else 0.0

    @property
    def total_j(self) -> float:
        """Everything charged so far, J."""
        return self.compute_j + self.tx_j + self.rx_j + self.idle_j
