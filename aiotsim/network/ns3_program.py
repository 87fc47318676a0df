"""The C++ side of the ns-3 engine: one ns-3 world that carries aiotsim's messages packet by packet.

Compiled by cppyy in the ns-3 worker process (:mod:`aiotsim.network.ns3_worker`) after the
calibration's prelude (:data:`~aiotsim.network.calibrate_ns3.NS3_PRELUDE`: TCP set up as the
calibration validates it, point-to-point links with drop-tail queues), so the engine and the
standalone calibration driver build the same ns-3. The world:

* **vertices** are ns-3 nodes with the internet stack, in aiotsim's vertex order;
* **wired links** (``AddWire``): one point-to-point link per vertex pair, each direction with its own
  data rate, drop-tail queue (packets) and packet loss (a ``RateErrorModel`` on the receiving
  device), one propagation delay, the link's MTU; no queue disc, so the device queue is the only
  buffer;
* **Wi-Fi** (``AddWifi``): an 802.11 infrastructure cell, one access point and one station per
  node, placed at given positions (m), with a standard, a channel width and a rate manager;
* **streams**: a message from ``src`` to ``dst`` rides a TCP stream. ``reuse``: one connection per
  ordered pair, kept open; ``per-transfer``: a new connection per message, closed once sent;
  ``duplex``: one connection per unordered pair that both directions share. Each vertex listens on
  one port; the receiver knows a stream by the sender's (address, port). A message is done when its
  stream has received the bytes up to its end; the receiver records (id, time) and stops the
  simulator, so the caller regains control at every completion;
* ``RunUntil(t)`` runs to absolute time ``t`` (ns) or the first completion, whichever is first.

Units: times in ns (int64, ns-3's resolution) at the interface, rates in bit/s, sizes in bytes.
"""

from __future__ import annotations

ENGINE_SOURCE = r"""
#include "ns3/wifi-module.h"
#include "ns3/mobility-module.h"
#include "ns3/energy-module.h"
#include "ns3/lte-module.h"
#include "ns3/lr-wpan-module.h"
#include "ns3/sixlowpan-module.h"
#include "ns3/spectrum-module.h"
#include "ns3/propagation-module.h"
#include <sstream>
#include <deque>
#include <set>
#include <memory>

namespace aiotsim_engine {
using namespace ns3;

const uint16_t PORT = 9000;

struct Message { int64_t id; uint64_t end; uint32_t retx_at_start; };

// One direction of traffic from src to dst: what the sender has queued and pushed into its
// socket, and what the receiver has read; messages end at cumulative byte offsets.
struct Stream {
  int src = -1, dst = -1;
  Ptr<Socket> tx, rx;
  uint64_t queued = 0, pushed = 0, received = 0;
  std::deque<Message> msgs;
  bool open = false;       // tx can send (connected, or the accepted side of a duplex pair)
  bool dead = false;       // cancelled: its bytes are ignored, it is never reused
  bool close_when_sent = false;
  uint32_t retx = 0;       // retransmitted segments on tx
};

class World {
 public:
  NodeContainer nodes;
  std::vector<Ipv4Address> address;   // per vertex: its first interface's address
  std::string connection = "reuse";   // reuse | per-transfer | duplex
  uint32_t segment = 1448;            // bytes of TCP payload per segment
  std::vector<Stream> streams;
  std::map<std::pair<int, int>, int> live;              // (src, dst) -> stream (reuse, duplex)
  std::map<std::pair<int, uint16_t>, int> by_peer;      // sender (vertex, port) -> stream
  std::map<uint32_t, int> vertex_of;                    // interface address -> vertex
  bool v6 = false;                                      // an IPv6 world (6LoWPAN): the addresses below
  std::vector<Ipv6Address> address6;                    // per vertex, for TCP
  std::map<std::string, int> vertex_of6;                // IPv6 address (text) -> vertex
  std::map<Socket*, int> rx_of, tx_of;                  // socket -> the stream it receives / sends
  std::vector<int64_t> done_id;
  std::vector<int64_t> done_ns;
  std::vector<uint32_t> done_retx;
  std::vector<Ptr<NetDevice>> devices;  // every device, in creation order (for counters)
  std::vector<uint32_t> max_queue;      // per device: most packets seen in its queue
  std::vector<uint64_t> drops, tx_bytes;
  std::vector<int64_t> tx_ns, rx_ns;                    // per device: time its radio sent / received
  std::vector<Ptr<energy::DeviceEnergyModel>> radio;    // per device: its radio energy model, if any
  std::vector<Ptr<WifiNetDevice>> stations;             // Wi-Fi stations, in node order
  std::vector<double> energy_at_start;                  // per device: J its radio drew in the warm-up
  int subnet = 0, cells = 0;
  int64_t last_progress_ns = 0;

  // The run's random stream and TCP: the calibration's set-up (aiotsim_common::set_up_tcp), then
  // the scenario's keys; called before Build (a stack reads the defaults when it is installed).
  void Configure(uint32_t run, std::string congestion, uint32_t iw, uint32_t segment_bytes, uint32_t buffer,
                 double min_rto_s, bool hystart, std::string conn) {
    aiotsim_common::set_up_tcp(run);
    Config::SetDefault("ns3::TcpL4Protocol::SocketType", StringValue(congestion));
    Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(iw));
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(segment_bytes));
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(buffer));
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(buffer));
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(Seconds(min_rto_s)));
    Config::SetDefault("ns3::TcpCubic::HyStart", BooleanValue(hystart));
    // Linux's tcp_retries2 (15: about 15 minutes of backed-off retransmissions) instead of ns-3's
    // 6, after which a connection is aborted: 13 of 1,000 downloads through one 100 Mbit/s server
    // link gave up 27 s in with ns-3's, where Linux keeps trying
    Config::SetDefault("ns3::TcpSocket::DataRetries", UintegerValue(15));
    segment = segment_bytes;
    connection = conn;
  }

  void Build(int n) {
    nodes.Create(n);
    InternetStackHelper stack;
    stack.Install(nodes);
    address.assign(n, Ipv4Address());
  }

  void track(Ptr<NetDevice> d) {
    int k = devices.size();
    devices.push_back(d);
    max_queue.push_back(0); drops.push_back(0); tx_bytes.push_back(0);
    tx_ns.push_back(0); rx_ns.push_back(0); radio.push_back(nullptr); energy_at_start.push_back(0.0);
    mac_queue.push_back(0);
    Ptr<PointToPointNetDevice> p = DynamicCast<PointToPointNetDevice>(d);
    if (p) {
      Ptr<Queue<Packet>> q = p->GetQueue();
      q->TraceConnectWithoutContext("PacketsInQueue", MakeBoundCallback(&World::OnQueue, this, k));
      q->TraceConnectWithoutContext("Drop", MakeBoundCallback(&World::OnDrop, this, k));
    }
    Ptr<WifiNetDevice> w = DynamicCast<WifiNetDevice>(d);
    if (w) {  // a Wi-Fi device: its PHY sends, its best-effort queue holds what waits for the air
      w->GetPhy()->TraceConnectWithoutContext("PhyTxBegin", MakeBoundCallback(&World::OnAirTx, this, k));
      Ptr<WifiMacQueue> q = w->GetMac()->GetTxopQueue(AC_BE);
      q->TraceConnectWithoutContext("PacketsInQueue", MakeBoundCallback(&World::OnQueue, this, k));
      q->TraceConnectWithoutContext("Drop", MakeBoundCallback(&World::OnAirDrop, this, k));
      w->GetPhy()->GetState()->TraceConnectWithoutContext("State", MakeBoundCallback(&World::OnPhyState, this, k));
    } else {
      d->TraceConnectWithoutContext("PhyTxBegin", MakeBoundCallback(&World::OnTx, this, k));
    }
  }
  static void OnAirTx(World* w, int k, Ptr<const Packet> p, double) { w->tx_bytes[k] += p->GetSize(); }
  static void OnAirDrop(World* w, int k, Ptr<const WifiMpdu>) { w->drops[k]++; }
  static void OnPhyState(World* w, int k, Time, Time duration, WifiPhyState state) {
    if (state == WifiPhyState::TX) w->tx_ns[k] += duration.GetNanoSeconds();
    if (state == WifiPhyState::RX) w->rx_ns[k] += duration.GetNanoSeconds();
  }
  double EnergyJ(int k) { return radio[k] ? radio[k]->GetTotalEnergyConsumption() - energy_at_start[k] : -1.0; }
  static void OnQueue(World* w, int k, uint32_t, uint32_t now) { if (now > w->max_queue[k]) w->max_queue[k] = now; }
  static void OnDrop(World* w, int k, Ptr<const Packet>) { w->drops[k]++; }
  static void OnTx(World* w, int k, Ptr<const Packet> p) { w->tx_bytes[k] += p->GetSize(); }

  // Point-to-point a <-> b: a -> b at `bps_ab` (bit/s) with a drop-tail queue of `queue_ab`
  // packets, b -> a likewise, one propagation delay (s); device 0 is a's, device 1 b's.
  static NetDeviceContainer p2p_pair(Ptr<Node> a, Ptr<Node> b, double bps_ab, double bps_ba, double delay_s,
                                     int queue_ab, int queue_ba) {
    PointToPointHelper p2p;
    p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(uint64_t(bps_ab))));
    p2p.SetChannelAttribute("Delay", TimeValue(Seconds(delay_s)));
    p2p.SetQueue("ns3::DropTailQueue", "MaxSize", StringValue(std::to_string(queue_ab) + "p"));
    NetDeviceContainer d = p2p.Install(a, b);
    d.Get(1)->SetAttribute("DataRate", DataRateValue(DataRate(uint64_t(bps_ba))));
    DynamicCast<PointToPointNetDevice>(d.Get(1))->GetQueue()->SetAttribute(
        "MaxSize", QueueSizeValue(QueueSize(std::to_string(queue_ba) + "p")));
    return d;
  }

  // `center` at the origin and `around` at (x, y) metres, standing still.
  static void place(Ptr<Node> center, NodeContainer around, std::vector<double> xs, std::vector<double> ys) {
    MobilityHelper mobility;
    Ptr<ListPositionAllocator> pos = CreateObject<ListPositionAllocator>();
    pos->Add(Vector(0.0, 0.0, 0.0));
    for (size_t i = 0; i < xs.size(); ++i) pos->Add(Vector(xs[i], ys[i], 0.0));
    mobility.SetPositionAllocator(pos);
    mobility.SetMobilityModel("ns3::ConstantPositionMobilityModel");
    NodeContainer all(center);
    all.Add(around);
    mobility.Install(all);
  }

  // Addresses for the devices `d` of vertices `owners` (one each) on a subnet of their own.
  // A /30 of 10.0.0.0/8 per point-to-point link (4 million of them), a cell's /16 of 172.16.0.0/12.
  void assign(NetDeviceContainer d, std::vector<int> owners, bool cell = false) {
    Ipv4AddressHelper addr;
    if (cell) {
      addr.SetBase(Ipv4Address(0xAC100000u + (uint32_t(cells++) << 16)), Ipv4Mask("255.255.0.0"));
    } else {
      addr.SetBase(Ipv4Address(0x0A000000u + (uint32_t(subnet++) << 2)), Ipv4Mask("255.255.255.252"));
    }
    Ipv4InterfaceContainer ifs = addr.Assign(d);
    for (size_t i = 0; i < owners.size(); ++i) {
      Ipv4Address a = ifs.GetAddress(i);
      vertex_of[a.Get()] = owners[i];
      if (address[owners[i]] == Ipv4Address()) address[owners[i]] = a;
    }
  }

  // Point-to-point a <-> b: each direction's rate (bit/s), queue (packets) and loss (packets lost
  // at the receiving device), one delay (s), the MTU (bytes). Returns the two device indices.
  void AddWire(int a, int b, double bps_ab, double bps_ba, double delay_s, int queue_ab, int queue_ba,
               double loss_ab, double loss_ba, int mtu) {
    NetDeviceContainer d = p2p_pair(nodes.Get(a), nodes.Get(b), bps_ab, bps_ba, delay_s, queue_ab, queue_ba);
    d.Get(0)->SetMtu(mtu);
    d.Get(1)->SetMtu(mtu);
    double losses[2] = {loss_ab, loss_ba};
    for (int side = 0; side < 2; ++side) {
      if (losses[side] > 0) {  // a -> b is lost at b's device, b -> a at a's
        Ptr<RateErrorModel> em = CreateObject<RateErrorModel>();
        em->SetAttribute("ErrorRate", DoubleValue(losses[side]));
        em->SetAttribute("ErrorUnit", StringValue("ERROR_UNIT_PACKET"));
        em->AssignStreams(1000 + devices.size() + side);
        d.Get(1 - side)->SetAttribute("ReceiveErrorModel", PointerValue(em));
      }
    }
    assign(d, {a, b});
    TrafficControlHelper().Uninstall(d);
    track(d.Get(0)); track(d.Get(1));
  }

  // An 802.11 cell: access point `ap` and stations `stas` at (x, y) metres (the ap at the origin),
  // `standard` (e.g. "802.11n"), `width_mhz`, `manager` (a WifiRemoteStationManager type),
  // `queue` packets of Wi-Fi MAC queue.
  void AddWifi(int ap, std::vector<int> stas, std::vector<double> xs, std::vector<double> ys,
               std::string standard, int width_mhz, std::string manager, int queue);

  // An LTE cell: UEs `ues` at (x, y) m around one eNB (ns-3's default proportional-fair scheduler,
  // `rb` resource blocks each way, RLC UM with `rlc_bytes` of buffer per bearer), its EPC
  // (PointToPointEpcHelper: SGW/PGW), and the PGW -- `server` point-to-point link (each direction's
  // rate, queue; one delay). Routes are static: the UEs' default route is the EPC's gateway, the
  // server reaches the UEs' 7.0.0.0/8 through the PGW (ns-3's lena-simple-epc example).
  void AddLte(std::vector<int> ues, std::vector<double> xs, std::vector<double> ys, int server, double bps_up,
              double bps_down, double delay_s, int queue_up, int queue_down, int rb, uint32_t rlc_bytes);
  Ptr<LteHelper> lte;
  NetDeviceContainer ue_devices;

  // ---- 802.15.4 with 6LoWPAN: IPv6 only (6LoWPAN carries no IPv4), static routes
  // made by AddLowPan and kept while the world runs (its destructor disposes the PAN's channel);
  // destroyed before the simulator, which a helper outliving it crashes
  std::unique_ptr<LrWpanHelper> lowpan;

  static std::string text(Ipv6Address a) { std::ostringstream o; o << a; return o.str(); }

  // One PAN: `sink` its coordinator (the 6LoWPAN border router) at the origin, `sensors` at (x, y)
  // m, all single-hop on one 2.4 GHz O-QPSK channel (250 kbit/s, unslotted CSMA/CA, MAC ACKs and
  // retries at 802.15.4's defaults); the sink reaches `server` over point-to-point (each
  // direction's rate and queue, one delay). TCP segments of `segment` bytes, timestamps off, and
  // 6LoWPAN contexts for both prefixes: one segment per 127-byte frame, no fragmentation.
  void AddLowPan(int sink, std::vector<int> sensors, std::vector<double> xs, std::vector<double> ys, int server,
                 double bps_up, double bps_down, double delay_s, int queue_up, int queue_down, uint32_t seg);

  // An 802.15.4 device's counters: frames its PHY sends (bytes), its MAC queue, frames its MAC
  // drops after its retries.
  void track_lowpan(Ptr<lrwpan::LrWpanNetDevice> d);
  std::vector<uint32_t> mac_queue;
  static void OnMacIn(World* w, int k, Ptr<const Packet>) {
    uint32_t q = ++w->mac_queue[k];
    if (q > w->max_queue[k]) w->max_queue[k] = q;
  }
  static void OnMacOut(World* w, int k, Ptr<const Packet>) { if (w->mac_queue[k]) --w->mac_queue[k]; }

  void Finish() {
    if (!lte && !v6) Ipv4GlobalRoutingHelper::PopulateRoutingTables();  // LTE and 6LoWPAN route statically
    for (uint32_t v = 0; v < nodes.GetN(); ++v) {
      Ptr<Socket> s = Socket::CreateSocket(nodes.Get(v), TcpSocketFactory::GetTypeId());
      if (v6) s->Bind(Inet6SocketAddress(Ipv6Address::GetAny(), PORT));
      else s->Bind(InetSocketAddress(Ipv4Address::GetAny(), PORT));
      s->Listen();
      // a receiver sends nothing back on its connection (except under duplex): shut its sending
      // side, so that the sender's close is answered by a FIN, as ns-3's PacketSink (the
      // calibration's receiver) does; the half-open socket left the FIN's ACKs off the wire
      if (connection != "duplex") s->ShutdownSend();
      s->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                           MakeCallback(&World::OnAccept, this));
    }
  }

  // ---- messages
  int open_stream(int src, int dst) {
    int k = streams.size();
    streams.emplace_back();
    Stream& s = streams.back();
    s.src = src; s.dst = dst;
    s.tx = Socket::CreateSocket(nodes.Get(src), TcpSocketFactory::GetTypeId());
    Address local;
    if (v6) {
      s.tx->Bind6();
      s.tx->GetSockName(local);
      by_peer[{src, Inet6SocketAddress::ConvertFrom(local).GetPort()}] = k;
    } else {
      s.tx->Bind();
      s.tx->GetSockName(local);
      by_peer[{src, InetSocketAddress::ConvertFrom(local).GetPort()}] = k;
    }
    tx_of[PeekPointer(s.tx)] = k;
    s.tx->SetConnectCallback(MakeCallback(&World::OnConnected, this), MakeCallback(&World::OnFailed, this));
    s.tx->SetCloseCallbacks(MakeNullCallback<void, Ptr<Socket>>(), MakeCallback(&World::OnFailed, this));
    s.tx->SetSendCallback(MakeCallback(&World::OnSendSpace, this));
    s.tx->TraceConnectWithoutContext("Retransmission", MakeBoundCallback(&World::OnRetx, this, k));
    if (v6) s.tx->Connect(Inet6SocketAddress(address6[dst], PORT));
    else s.tx->Connect(InetSocketAddress(address[dst], PORT));
    return k;
  }

  static void OnRetx(World* w, int k, Ptr<const Packet>, const TcpHeader&, const Address&, const Address&,
                     Ptr<const TcpSocketBase>) { w->streams[k].retx++; }

  // The stream a message from src to dst rides; opens one where none is live.
  int stream_for(int src, int dst) {
    if (connection == "per-transfer") {
      int k = open_stream(src, dst);
      streams[k].close_when_sent = true;
      return k;
    }
    auto it = live.find({src, dst});
    if (it != live.end() && !streams[it->second].dead) return it->second;
    int k = open_stream(src, dst);
    live[{src, dst}] = k;
    if (connection == "duplex") {  // the reverse direction rides the same connection
      int r = streams.size();
      streams.emplace_back();
      streams[r].src = dst; streams[r].dst = src;
      streams[r].rx = streams[k].tx;
      rx_of[PeekPointer(streams[k].tx)] = r;
      streams[k].tx->SetRecvCallback(MakeCallback(&World::OnRecv, this));
      live[{dst, src}] = r;
    }
    return k;
  }

  // Message `id`: `bytes` (>= 1) from src to dst, handed to TCP at absolute time `at_ns`.
  void Send(int64_t id, int src, int dst, uint64_t bytes, int64_t at_ns) {
    Simulator::Schedule(NanoSeconds(at_ns) - Simulator::Now(), &World::DoSend, this, id, src, dst, bytes);
  }
  void DoSend(int64_t id, int src, int dst, uint64_t bytes) {
    int k = stream_for(src, dst);
    Stream& s = streams[k];
    s.queued += bytes;
    s.msgs.push_back({id, s.queued, s.retx});
    if (s.open) Push(k);
  }

  void Push(int k) {
    Stream& s = streams[k];
    while (s.pushed < s.queued && !s.dead) {
      uint32_t room = s.tx->GetTxAvailable();
      if (room == 0) return;
      uint64_t n = std::min<uint64_t>({uint64_t(room), s.queued - s.pushed, uint64_t(65536)});
      int sent = s.tx->Send(ns3::Create<Packet>(uint32_t(n)));
      if (sent <= 0) return;
      s.pushed += sent;
    }
    if (s.close_when_sent && s.pushed == s.queued) s.tx->Close();  // closes once the buffer drains
  }

  // Stop carrying message `id`'s stream (its sender is gone): no more bytes are pushed, what is
  // already in the socket's buffer still drains, and nothing more is delivered from it.
  void Cancel(int64_t id) {
    for (size_t k = 0; k < streams.size(); ++k) {
      Stream& s = streams[k];
      for (const Message& m : s.msgs) {
        if (m.id != id) continue;
        s.dead = true;
        s.msgs.clear();
        if (s.tx) s.tx->Close();
        live.erase({s.src, s.dst});
        if (connection == "duplex") live.erase({s.dst, s.src});
        return;
      }
    }
  }

  void OnConnected(Ptr<Socket> sock) {
    int k = tx_of[PeekPointer(sock)];
    streams[k].open = true;
    Push(k);
  }
  // TCP gave up on a stream (its connection could not open, or was aborted after DataRetries):
  // its messages can never arrive; the caller is told at once
  void OnFailed(Ptr<Socket> sock) {
    auto it = tx_of.find(PeekPointer(sock));
    if (it == tx_of.end()) return;
    Stream& s = streams[it->second];
    if (s.dead) return;  // cancelled on purpose
    s.dead = true;
    for (const Message& m : s.msgs) failed_id.push_back(m.id);
    s.msgs.clear();
    if (!failed_id.empty()) Simulator::Stop();
  }
  std::vector<int64_t> failed_id;
  void OnSendSpace(Ptr<Socket> sock, uint32_t) {
    auto it = tx_of.find(PeekPointer(sock));
    if (it != tx_of.end() && streams[it->second].open) Push(it->second);
  }

  void OnAccept(Ptr<Socket> sock, const Address& from) {
    int vertex = -1;
    uint16_t port = 0;
    if (Inet6SocketAddress::IsMatchingType(from)) {
      Inet6SocketAddress peer = Inet6SocketAddress::ConvertFrom(from);
      auto v = vertex_of6.find(text(peer.GetIpv6()));
      if (v != vertex_of6.end()) vertex = v->second;
      port = peer.GetPort();
    } else {
      InetSocketAddress peer = InetSocketAddress::ConvertFrom(from);
      auto v = vertex_of.find(peer.GetIpv4().Get());
      if (v != vertex_of.end()) vertex = v->second;
      port = peer.GetPort();
    }
    if (vertex < 0) return;
    auto it = by_peer.find({vertex, port});
    if (it == by_peer.end()) return;
    int k = it->second;
    streams[k].rx = sock;
    rx_of[PeekPointer(sock)] = k;
    sock->SetRecvCallback(MakeCallback(&World::OnRecv, this));
    if (connection == "duplex") {  // the accepting side sends its messages back on this socket
      auto r = live.find({streams[k].dst, streams[k].src});
      if (r != live.end()) {
        Stream& back = streams[r->second];
        back.tx = sock;
        back.open = true;
        tx_of[PeekPointer(sock)] = r->second;
        sock->SetSendCallback(MakeCallback(&World::OnSendSpace, this));
        sock->TraceConnectWithoutContext("Retransmission", MakeBoundCallback(&World::OnRetx, this, r->second));
        Push(r->second);
      }
    }
  }

  void OnRecv(Ptr<Socket> sock) {
    auto it = rx_of.find(PeekPointer(sock));
    Ptr<Packet> p;
    while ((p = sock->Recv())) {
      if (it == rx_of.end()) continue;
      Stream& s = streams[it->second];
      if (s.dead) continue;
      s.received += p->GetSize();
      last_progress_ns = Simulator::Now().GetNanoSeconds();
      while (!s.msgs.empty() && s.msgs.front().end <= s.received) {
        done_id.push_back(s.msgs.front().id);
        done_ns.push_back(Simulator::Now().GetNanoSeconds());
        done_retx.push_back(s.retx - s.msgs.front().retx_at_start);
        s.msgs.pop_front();
        Simulator::Stop();  // hand control back at every completion
      }
    }
  }

  // Run to absolute time `until_ns` or the first completion; returns ns-3's clock (ns), or -1 when
  // ns-3 has no event left before `until_ns` (nothing in flight can ever arrive).
  int64_t RunUntil(int64_t until_ns) {
    done_id.clear(); done_ns.clear(); done_retx.clear(); failed_id.clear();
    int64_t now = Simulator::Now().GetNanoSeconds();
    EventId stop = Simulator::Stop(NanoSeconds(until_ns - now));
    Simulator::Run();
    bool stopped_at_limit = !stop.IsPending();
    if (!stopped_at_limit) Simulator::Cancel(stop);
    if (done_id.empty() && failed_id.empty() && !stopped_at_limit) return -1;  // Run returned: no event left
    return Simulator::Now().GetNanoSeconds();
  }

  int64_t Now() { return Simulator::Now().GetNanoSeconds(); }

  // Run the world alone until `until_ns` (stations scan for and join their access point); the
  // stations not associated by then, in node order.
  std::vector<int> WarmUp(int64_t until_ns) {
    RunUntil(until_ns);
    for (size_t k = 0; k < devices.size(); ++k) {  // the counters count the run, not the warm-up
      max_queue[k] = drops[k] = tx_bytes[k] = 0;
      tx_ns[k] = rx_ns[k] = 0;
      energy_at_start[k] = radio[k] ? radio[k]->GetTotalEnergyConsumption() : 0.0;
    }
    std::vector<int> lost;
    for (size_t i = 0; i < stations.size(); ++i)
      if (!DynamicCast<StaWifiMac>(stations[i]->GetMac())->IsAssociated()) lost.push_back(i);
    for (size_t i = 0; i < ue_devices.GetN(); ++i)
      if (DynamicCast<LteUeNetDevice>(ue_devices.Get(i))->GetRrc()->GetState() != LteUeRrc::CONNECTED_NORMALLY)
        lost.push_back(i);
    return lost;
  }
  // The world's end: the simulator and all it owns, then every attribute default, global value and
  // automatic random stream number back to a new process's, so that a reused worker's next world
  // is built and drawn exactly as in a new worker (Mac48Address's counter resets with the simulator).
  void Destroy() {
    lowpan.reset();
    Simulator::Destroy();
    Config::Reset();
    RngSeedManager::ResetNextStreamIndex();
  }
};
}  // namespace aiotsim_engine
"""
