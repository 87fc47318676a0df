"""The C++ of the ns-3 engine's radio cells: :class:`World`'s Wi-Fi, LTE and 802.15.4 members.

Declared in :data:`~aiotsim.network.ns3_program.ENGINE_SOURCE` (with what each does), defined here
(split out to keep each file short); the worker compiles this after the engine's source.
"""

from __future__ import annotations

RADIO_SOURCE = r"""
namespace aiotsim_engine {
using namespace ns3;

void World::AddWifi(int ap, std::vector<int> stas, std::vector<double> xs, std::vector<double> ys,
             std::string standard, int width_mhz, std::string manager, int queue) {
  NodeContainer sta;
  for (int s : stas) sta.Add(nodes.Get(s));
  YansWifiChannelHelper channel = YansWifiChannelHelper::Default();
  YansWifiPhyHelper phy;
  phy.SetChannel(channel.Create());
  std::string band = (standard == "802.11ac" || standard == "802.11a") ? "5GHZ" : "2_4GHZ";
  phy.Set("ChannelSettings", StringValue("{0, " + std::to_string(width_mhz) + ", BAND_" + band + ", 0}"));
  WifiHelper wifi;
  wifi.SetStandard(standard == "802.11n" ? WIFI_STANDARD_80211n
                   : standard == "802.11ac" ? WIFI_STANDARD_80211ac
                   : standard == "802.11ax" ? WIFI_STANDARD_80211ax
                   : standard == "802.11g" ? WIFI_STANDARD_80211g
                   : standard == "802.11a" ? WIFI_STANDARD_80211a
                                           : WIFI_STANDARD_80211b);
  wifi.SetRemoteStationManager(manager);
  WifiMacHelper mac;
  Ssid ssid = Ssid("aiotsim");
  mac.SetType("ns3::StaWifiMac", "Ssid", SsidValue(ssid), "ActiveProbing", BooleanValue(false));
  NetDeviceContainer sd = wifi.Install(phy, mac, sta);
  mac.SetType("ns3::ApWifiMac", "Ssid", SsidValue(ssid));
  NetDeviceContainer ad = wifi.Install(phy, mac, nodes.Get(ap));
  place(nodes.Get(ap), sta, xs, ys);
  NetDeviceContainer d(ad);
  d.Add(sd);
  Config::Set("/NodeList/*/DeviceList/*/$ns3::WifiNetDevice/Mac/*/Queue/MaxSize",
              QueueSizeValue(QueueSize(std::to_string(queue) + "p")));
  std::vector<int> owners{ap};
  owners.insert(owners.end(), stas.begin(), stas.end());
  assign(d, owners, true);
  size_t first = devices.size();
  for (size_t i = 0; i < d.GetN(); ++i) track(d.Get(i));
  // each station's radio on ns-3's Wi-Fi radio energy model (its default currents, a 3 V source
  // that never runs out): the energy its states (TX, RX, idle, CCA busy) draw over the run
  BasicEnergySourceHelper battery;
  battery.Set("BasicEnergySourceInitialEnergyJ", DoubleValue(1e8));  // 1e12 overflows its depletion time
  energy::EnergySourceContainer sources = battery.Install(sta);
  energy::DeviceEnergyModelContainer models = WifiRadioEnergyModelHelper().Install(sd, sources);
  for (size_t i = 0; i < models.GetN(); ++i) radio[first + 1 + i] = models.Get(i);
  for (size_t i = 0; i < sd.GetN(); ++i) stations.push_back(DynamicCast<WifiNetDevice>(sd.Get(i)));
}

void World::AddLte(std::vector<int> ues, std::vector<double> xs, std::vector<double> ys, int server, double bps_up,
            double bps_down, double delay_s, int queue_up, int queue_down, int rb, uint32_t rlc_bytes) {
  Config::SetDefault("ns3::LteRlcUm::MaxTxBufferSize", UintegerValue(rlc_bytes));
  Config::SetDefault("ns3::LteEnbNetDevice::UlBandwidth", UintegerValue(rb));
  Config::SetDefault("ns3::LteEnbNetDevice::DlBandwidth", UintegerValue(rb));
  lte = CreateObject<LteHelper>();
  Ptr<PointToPointEpcHelper> epc = CreateObject<PointToPointEpcHelper>();
  lte->SetEpcHelper(epc);
  Ptr<Node> pgw = epc->GetPgwNode();
  NetDeviceContainer d = p2p_pair(pgw, nodes.Get(server), bps_up, bps_down, delay_s, queue_up, queue_down);
  Ipv4AddressHelper addr;
  addr.SetBase("1.0.0.0", "255.0.0.0");
  Ipv4InterfaceContainer ifs = addr.Assign(d);
  TrafficControlHelper().Uninstall(d);
  address[server] = ifs.GetAddress(1);
  vertex_of[ifs.GetAddress(1).Get()] = server;
  track(d.Get(0)); track(d.Get(1));
  Ipv4StaticRoutingHelper routes;
  Ptr<Ipv4> sip = nodes.Get(server)->GetObject<Ipv4>();
  routes.GetStaticRouting(sip)->AddNetworkRouteTo(Ipv4Address("7.0.0.0"), Ipv4Mask("255.0.0.0"),
                                                  sip->GetInterfaceForDevice(d.Get(1)));
  NodeContainer enb;
  enb.Create(1);
  NodeContainer ue;
  for (int u : ues) ue.Add(nodes.Get(u));
  place(enb.Get(0), ue, xs, ys);
  NetDeviceContainer enb_dev = lte->InstallEnbDevice(enb);
  ue_devices = lte->InstallUeDevice(ue);
  Ipv4InterfaceContainer ue_ifs = epc->AssignUeIpv4Address(ue_devices);
  for (size_t i = 0; i < ues.size(); ++i) {
    address[ues[i]] = ue_ifs.GetAddress(i);
    vertex_of[ue_ifs.GetAddress(i).Get()] = ues[i];
    Ptr<Ipv4> ip = nodes.Get(ues[i])->GetObject<Ipv4>();
    routes.GetStaticRouting(ip)->SetDefaultRoute(epc->GetUeDefaultGatewayAddress(),
                                                 ip->GetInterfaceForDevice(ue_devices.Get(i)));
  }
  lte->Attach(ue_devices, enb_dev.Get(0));
}

void World::AddLowPan(int sink, std::vector<int> sensors, std::vector<double> xs, std::vector<double> ys, int server,
               double bps_up, double bps_down, double delay_s, int queue_up, int queue_down, uint32_t seg) {
  v6 = true;
  address6.assign(nodes.GetN(), Ipv6Address());
  Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(seg));
  Config::SetDefault("ns3::TcpSocketBase::Timestamp", BooleanValue(false));
  segment = seg;
  NodeContainer around;
  for (int v : sensors) around.Add(nodes.Get(v));
  place(nodes.Get(sink), around, xs, ys);
  NodeContainer pan(nodes.Get(sink));
  pan.Add(around);
  lowpan = std::make_unique<LrWpanHelper>();
  lowpan->AddPropagationLossModel("ns3::LogDistancePropagationLossModel");
  lowpan->SetPropagationDelayModel("ns3::ConstantSpeedPropagationDelayModel");
  NetDeviceContainer lr = lowpan->Install(pan);
  lowpan->CreateAssociatedPan(lr, 0xbeef);  // the first device is the coordinator
  lowpan->AssignStreams(lr, 100);
  for (uint32_t i = 0; i < lr.GetN(); ++i) {
    Ptr<lrwpan::LrWpanNetDevice> d = DynamicCast<lrwpan::LrWpanNetDevice>(lr.Get(i));
    lowpan->AddMobility(d->GetPhy(), pan.Get(i)->GetObject<MobilityModel>());
    track_lowpan(d);
  }
  SixLowPanHelper six_helper;
  NetDeviceContainer six = six_helper.Install(lr);
  six_helper.AddContext(six, 0, Ipv6Prefix("2001:1::", 64), Time(Seconds(1e6)));
  six_helper.AddContext(six, 1, Ipv6Prefix("2001:2::", 64), Time(Seconds(1e6)));
  NetDeviceContainer wire =
      p2p_pair(nodes.Get(sink), nodes.Get(server), bps_up, bps_down, delay_s, queue_up, queue_down);
  track(wire.Get(0)); track(wire.Get(1));
  Ipv6AddressHelper ip6;  // 2001:db8::/32 would be dropped when forwarded (documentation class)
  ip6.SetBase(Ipv6Address("2001:1::"), Ipv6Prefix(64));
  Ipv6InterfaceContainer pan_ifs = ip6.Assign(six);
  ip6.SetBase(Ipv6Address("2001:2::"), Ipv6Prefix(64));
  Ipv6InterfaceContainer wire_ifs = ip6.Assign(wire);
  TrafficControlHelper().Uninstall(wire);  // after the addresses, as AddWire: no queue disc
  pan_ifs.SetForwarding(0, true);
  wire_ifs.SetForwarding(0, true);
  Ipv6Address sink_pan = pan_ifs.GetAddress(0, 1), sink_wire = wire_ifs.GetAddress(0, 1);
  address6[sink] = sink_pan;
  address6[server] = wire_ifs.GetAddress(1, 1);
  vertex_of6[text(sink_pan)] = sink; vertex_of6[text(sink_wire)] = sink;
  vertex_of6[text(address6[server])] = server;
  Ipv6StaticRoutingHelper routes;
  for (size_t i = 0; i < sensors.size(); ++i) {
    Ptr<Ipv6> ip = nodes.Get(sensors[i])->GetObject<Ipv6>();
    routes.GetStaticRouting(ip)->SetDefaultRoute(sink_pan, ip->GetInterfaceForDevice(six.Get(i + 1)));
    address6[sensors[i]] = pan_ifs.GetAddress(i + 1, 1);
    vertex_of6[text(address6[sensors[i]])] = sensors[i];
  }
  Ptr<Ipv6> sip = nodes.Get(server)->GetObject<Ipv6>();
  routes.GetStaticRouting(sip)->AddNetworkRouteTo(Ipv6Address("2001:1::"), Ipv6Prefix(64), sink_wire,
                                                  sip->GetInterfaceForDevice(wire.Get(1)));
}

void World::track_lowpan(Ptr<lrwpan::LrWpanNetDevice> d) {
  int k = devices.size();
  devices.push_back(d);
  max_queue.push_back(0); drops.push_back(0); tx_bytes.push_back(0);
  tx_ns.push_back(0); rx_ns.push_back(0); radio.push_back(nullptr); energy_at_start.push_back(0.0);
  mac_queue.push_back(0);
  d->GetPhy()->TraceConnectWithoutContext("PhyTxBegin", MakeBoundCallback(&World::OnTx, this, k));
  d->GetMac()->TraceConnectWithoutContext("MacTxEnqueue", MakeBoundCallback(&World::OnMacIn, this, k));
  d->GetMac()->TraceConnectWithoutContext("MacTxDequeue", MakeBoundCallback(&World::OnMacOut, this, k));
  d->GetMac()->TraceConnectWithoutContext("MacTxDrop", MakeBoundCallback(&World::OnDrop, this, k));
}
}  // namespace aiotsim_engine
"""
