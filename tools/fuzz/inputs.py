"""Damaged input files that a scenario names: link traces, availability traces, custom topologies.

Each ``*_case`` function takes a seeded ``random.Random``, the case's directory and the small base
scenarios, writes the files the case needs there (a trace, a FIFO, a symlink loop...) and returns
``(scenario dict, description, checks)``; ``checks['secrets']`` are strings that must never appear
in the command's output (a file's content echoed in an error message is a leak).
"""

from __future__ import annotations

import copy
import os
import random
from pathlib import Path
from typing import Any

SECRET = "SECRET_7f3a"  # first line of files whose content must not be echoed
SPECIAL_SECRETS = {"/etc/passwd": "root:x:0", "/proc/self/environ": "AIOTSIM_MAX_MEMORY_GB="}
Case = tuple[dict[str, Any], str, dict[str, Any]]


def _valid_mahimahi(rng: random.Random) -> str:
    times = sorted(rng.randint(0, 400) for _ in range(rng.randint(5, 60)))
    return "\n".join(map(str, times + [max(times) + rng.randint(1, 50)])) + "\n"


MAHIMAHI: dict[str, Any] = {
    "ok": _valid_mahimahi,
    "unicode-digit": lambda r: _valid_mahimahi(r) + r.choice(["²", "١٢", "𝟠", "٣\n", "½", "Ⅷ", "①"]) + "\n",
    "huge-last": lambda r: f"1\n{r.choice([10**11, 5 * 10**7, 10**15, 2**63, 10**30, 10**400])}\n",
    "sparse": lambda r: f"0\n{r.choice([50_000_000, 10**9, 86_400_000])}\n",
    "single": lambda r: f"{r.choice([0, 1, 5])}\n",
    "zeros": lambda r: "0\n" * r.randint(1, 5),
    "empty": lambda r: r.choice(["", "\n", "  \n\n", "# only a comment\n"]),
    "negative": lambda r: "-5\n10\n",
    "decreasing": lambda r: "10\n5\n1\n",
    "float": lambda r: "1.5\n2.5\n",
    "nul": lambda r: "1\n2\x003\n4\n",
    "bom-crlf": lambda r: "\ufeff1\r\n2\r\n3\r\n",
    "leak": lambda r: f"{SECRET}\n1\n2\n",
    "long-line": lambda r: "1" * 100_000 + "\n",
    "burst": lambda r: "1\n" * 20_000 + "2\n",
    "spaces": lambda r: " 1 \n\t2\n3 # c\n",
    "hex": lambda r: "0x10\n0x20\n",
    "underscore": lambda r: "1_0\n2_0\n",
}

CSV: dict[str, Any] = {
    "ok": lambda r: "time_s,mbps\n0,1\n1,2.5\n2,0\n",
    "all-zero": lambda r: "0,0\n1,0\n2,0\n",
    "negative": lambda r: "0,-1\n1,1\n",
    "nan": lambda r: f"0,{r.choice(['nan', 'inf', '-inf', 'NaN', '1e400'])}\n1,1\n",
    "tiny-rate": lambda r: f"0,{r.choice(['1e-12', '5e-324', '1e-9', '1e-5'])}\n1,1\n",
    "huge-rate": lambda r: f"0,{r.choice(['1e300', '1e20', '1.7e308'])}\n1,1\n",
    "huge-period": lambda r: f"0,1\n{r.choice(['1e300', '1e20', '1e12', '1e9'])},1\n",
    "tiny-period": lambda r: f"0,1\n{r.choice(['1e-12', '5e-324', '1e-9'])},1\n",
    "not-increasing": lambda r: "0,1\n0,2\n1,1\n",
    "late-start": lambda r: "5,1\n6,1\n",
    "header-only": lambda r: "time_s,mbps\n",
    "one-row": lambda r: "0,1\n",
    "one-column": lambda r: "0\n1\n",
    "extra-columns": lambda r: "0,1,2,3\n1,1,2,3\n",
    "unicode-digit": lambda r: "0,1\n²,1\n",
    "leak": lambda r: f"{SECRET},x\n0,1\n1,1\n",
    "nul": lambda r: "0,1\x00\n1,1\n",
    "many-rows": lambda r: "".join(f"{k * 1e-3:.3f},{1 + k % 7}\n" for k in range(20_000)),
}


def write_damaged(path: Path, kind_table: dict[str, Any], rng: random.Random) -> str:
    """Write ``path`` with a content kind of ``kind_table`` (or raw binary); returns the kind.
    A third are the table's valid ``ok`` kind, so that runs meet edge settings with a good file."""
    kind = "ok" if rng.random() < 0.33 else rng.choice([*kind_table, "binary"])
    if kind == "binary":
        path.write_bytes(rng.randbytes(rng.randint(1, 256)))
    else:
        path.write_text(kind_table[kind](rng), encoding="utf-8")
    return kind


def special_path(rng: random.Random, case_dir: Path, name: str) -> tuple[str, str]:
    """A path that is not a plain readable file: ``(path, kind)``."""
    kind = rng.choice(["fifo", "dev-zero", "dev-null", "symlink-loop", "directory", "missing", "nul-in-path",
                       "etc-passwd", "proc-environ", "dangling"])  # fmt: skip
    p = case_dir / name
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "symlink-loop":
        os.symlink(case_dir / f"{name}.b", p)
        os.symlink(p, case_dir / f"{name}.b")
    elif kind == "dangling":
        os.symlink(case_dir / "nowhere", p)
    elif kind == "directory":
        p.mkdir()
    fixed = {"dev-zero": "/dev/zero", "dev-null": "/dev/null", "etc-passwd": "/etc/passwd",
             "proc-environ": "/proc/self/environ", "nul-in-path": str(p) + "\x00x"}  # fmt: skip
    return fixed.get(kind, str(p)), kind


def _file_or_special(rng: random.Random, case_dir: Path, name: str, table: dict[str, Any]) -> tuple[str, str, list]:
    if rng.random() < 0.25:
        path, kind = special_path(rng, case_dir, name)
        return path, kind, [SPECIAL_SECRETS[path]] if path in SPECIAL_SECRETS else []
    p = case_dir / name
    kind = write_damaged(p, table, rng)
    return str(p), kind, [SECRET]


def trace_case(rng: random.Random, case_dir: Path, bases: dict[str, dict[str, Any]]) -> Case:
    """A link trace (Mahimahi or CSV) on node links, a group's links or a custom link."""
    where = rng.choice(["network", "network", "group", "link"])
    csv = rng.random() < 0.4
    path, kind, secrets = _file_or_special(rng, case_dir, "link.csv" if csv else "link.up", CSV if csv else MAHIMAHI)
    if where == "group":
        data = copy.deepcopy(bases["hetero_async"])
        g = rng.choice(data["nodes"]["group"])
        g[rng.choice(["uplink_trace", "downlink_trace"])] = path
        key = "nodes.group[].trace"
    elif where == "link":
        data = copy.deepcopy(bases["custom"])
        rng.choice(data["network"]["link"])["trace"] = path
        key = "network.link[].trace"
    else:
        data = copy.deepcopy(bases[rng.choice(["tiny", "cellular_trace", "iot10", "ring"])])
        data["network"][rng.choice(["uplink_trace", "downlink_trace"])] = path
        key = "network.*_trace"
    nw = data["network"]
    if rng.random() < 0.5:
        nw["trace_resolution_ms"] = rng.choice([0.0, 1e-9, 1e-6, 1e-3, 0.5, 100.0, 1e4, 1e6])
    if rng.random() < 0.3:
        nw["trace_offset_s"] = rng.choice([0.0, 1e-9, 0.5, 1e5, 1e6])
    if rng.random() < 0.3:
        nw["trace_stagger"] = rng.choice(["none", "random"])
    extra = {k: nw[k] for k in ("trace_resolution_ms", "trace_offset_s") if k in nw}
    return data, f"trace {key} {'csv' if csv else 'mahimahi'}:{kind} {extra}", {"secrets": secrets}


def _availability_rows(rng: random.Random) -> str:
    n = rng.randint(1, 4)
    return "node,start_s,end_s\n" + "".join(f"{k},0,{rng.choice([1, 50, 1e9])}\n" for k in range(n))


AVAILABILITY: dict[str, Any] = {
    "ok": _availability_rows,
    "node-name": lambda r: "node,start_s,end_s\nnode0,0,100\nnode2,5,1e6\n",
    "start-after-end": lambda r: "0,10,5\n",
    "equal": lambda r: "0,5,5\n",
    "negative": lambda r: "0,-5,5\n",
    "nan": lambda r: f"0,0,{r.choice(['nan', 'inf', '1e400', '-inf'])}\n",
    "out-of-range": lambda r: f"{r.choice(['99', '-1', 'node99', 'node-1', '3.5', 'node01', 'server'])},0,10\n",
    "unicode-digit": lambda r: "²,0,10\n",
    "all-offline": lambda r: "".join(f"{k},1e8,1e9\n" for k in range(4)),
    "never-online": lambda r: "0,1e9,1e9\n",
    "empty": lambda r: r.choice(["", "node,start_s,end_s\n", "# c\n"]),
    "many": lambda r: "".join(f"{k % 3},{2 * k},{2 * k + 1}\n" for k in range(20_000)),
    "leak": lambda r: f"{SECRET},0,1\n",
    "bom": lambda r: "\ufeffnode,start_s,end_s\n0,0,10\n",
    "nul": lambda r: "0,0,1\x000\n",
    "columns": lambda r: r.choice(["0,1\n", "0,1,2,3\n", "0;1;2\n", '"0",0,1\n']),
}


def availability_case(rng: random.Random, case_dir: Path, bases: dict[str, dict[str, Any]]) -> Case:
    """A federated scenario with a damaged ``nodes.availability_trace``."""
    data = copy.deepcopy(bases["fedavg100"])
    path, kind, secrets = _file_or_special(rng, case_dir, "avail.csv", AVAILABILITY)
    data["nodes"]["availability_trace"] = path
    if rng.random() < 0.3:
        data["nodes"]["count"] = rng.choice([1, 2, 4, 8])
    return data, f"availability:{kind}", {"secrets": secrets}


def topology_case(rng: random.Random, case_dir: Path, bases: dict[str, dict[str, Any]]) -> Case:
    """A custom topology with one structural mutation (aggregators, cycles, reachability, names)."""
    data = copy.deepcopy(bases["custom"])
    kind = rng.choice(list(TOPOLOGY_MUTATIONS))
    TOPOLOGY_MUTATIONS[kind](rng, data["network"], data["nodes"])
    return data, f"topology:{kind} (nodes {data['nodes']['count']}, links {len(data['network']['link'])})", {}


def _vertex(nw: dict[str, Any], **kw: Any) -> None:
    nw.setdefault("vertex", []).append(kw)


def _link(nw: dict[str, Any], a: str, b: str, **kw: Any) -> None:
    nw["link"].append({"from": a, "to": b, "mbps": kw.pop("mbps", 5.0), "latency_ms": 1.0, **kw})


def _many_nodes(rng: random.Random, nw: dict[str, Any], nodes: dict[str, Any]) -> None:
    count = rng.choice([1000, 10_000, 100_000])
    nodes["count"] = count
    if rng.random() < 0.5 and count <= 10_000:
        nw["link"] += [{"from": f"node{k}", "to": "ap", "mbps": 1.0, "latency_ms": 1.0} for k in range(4, count)]


TOPOLOGY_MUTATIONS: dict[str, Any] = {
    "aggregator-is-node": lambda r, nw, nd: _vertex(nw, name="node0", role="node", aggregator="node1"),
    "relay-aggregator-node": lambda r, nw, nd: nw["vertex"][0].update(aggregator=r.choice(["node2", "node3"])),
    "aggregator-self": lambda r, nw, nd: nw["vertex"][0].update(aggregator="ap"),
    "aggregator-unknown": lambda r, nw, nd: nw["vertex"][0].update(aggregator="nowhere"),
    "aggregator-server": lambda r, nw, nd: nw["vertex"][0].update(aggregator="server"),
    "gateway-cycle": lambda r, nw, nd: (
        nw["vertex"].clear(),
        _vertex(nw, name="ap", role="gateway", aggregator="g2"),
        _vertex(nw, name="g2", role="gateway", aggregator="ap"),
        _link(nw, "ap", "g2"),
        _link(nw, "g2", "server"),
    ),
    "gateway": lambda r, nw, nd: nw["vertex"][0].update(role="gateway"),
    "unreachable-node": lambda r, nw, nd: nw.update(link=[x for x in nw["link"] if x["from"] != "node3"]),
    "unreachable-relay": lambda r, nw, nd: nw.update(link=[x for x in nw["link"] if x["to"] != "server"]),
    "duplicate-vertex": lambda r, nw, nd: _vertex(nw, name="ap", role="relay"),
    "vertex-named-server": lambda r, nw, nd: _vertex(nw, name="server", role=r.choice(["relay", "server", "node"])),
    "second-server": lambda r, nw, nd: (_vertex(nw, name="s2", role="server"), _link(nw, "ap", "s2")),
    "vertex-named-node": lambda r, nw, nd: _vertex(nw, name=r.choice(["node0", "node9", "node-1"]), role="relay"),
    "duplicate-link": lambda r, nw, nd: nw["link"].append(dict(nw["link"][0])),
    "self-link": lambda r, nw, nd: _link(nw, "node0", "node0"),
    "unknown-endpoint": lambda r, nw, nd: _link(nw, "node0", r.choice(["nowhere", "node99", "", "Server"])),
    "directed-up-only": lambda r, nw, nd: [x.update(directed=True) for x in nw["link"]],
    "directed-down-only": lambda r, nw, nd: nw.update(
        link=[{**x, "from": x["to"], "to": x["from"], "directed": True} for x in nw["link"]]
    ),
    "cycle": lambda r, nw, nd: (_vertex(nw, name="r2", role="relay"), _link(nw, "ap", "r2"), _link(nw, "r2", "node0")),
    "slow-latency": lambda r, nw, nd: nw["link"][0].update(latency_ms=r.choice([1e6, 1e5, 999_999.0])),
    "slow-rate": lambda r, nw, nd: nw["link"][0].update(mbps=r.choice([1e-4, 2e-4, 1e-3])),
    "fewer-nodes": lambda r, nw, nd: nd.update(count=r.choice([1, 2])),
    "more-nodes": lambda r, nw, nd: nd.update(count=r.choice([5, 8])),
    "many-nodes": _many_nodes,
    "no-links": lambda r, nw, nd: nw.update(link=[]),
    "isolated-vertex": lambda r, nw, nd: _vertex(nw, name="lonely", role=r.choice(["relay", "gateway"])),
}
