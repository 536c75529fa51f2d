#!/usr/bin/python3
"""link_report: the table and JSON of bench/link/link-bench.sh.

Reads the list of runs the script wrote (one line per run: path, MTU,
protocol, driver, test, run number, and the prefix of that run's files) and
each run's files: the homa-perf client's JSON (last line), sockperf's or
udp_ceiling's output, and perf stat's CSV for the client and the server
over the measured window.  Prints, per path and test, the median over the
runs of goodput, latency percentiles, CPU seconds per GB and system calls
per MB on both ends, and the Homa/TCP ratios; with a JSON path, writes
every run and the medians there (homa-plot kind "link").

Usage: link_report.py RUNS.txt [OUT.json] [RATE] [DELAY]
"""

import json
import os
import re
import socket
import statistics
import sys
import time


def last_json(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [ln for ln in f.read().splitlines() if ln.strip()]
    except OSError:
        return None
    for ln in reversed(lines):
        if ln.lstrip().startswith("{"):
            try:
                return json.loads(ln)
            except ValueError:
                return None
    return None


def perf_stat(path):
    """(cpu seconds, system calls) from `perf stat -x,` output; None if absent."""
    cpu = calls = None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for ln in f:
                parts = ln.strip().split(",")
                if len(parts) < 3:
                    continue
                try:
                    v = float(parts[0])
                except ValueError:
                    continue
                if parts[2] == "task-clock":
                    cpu = v / 1000.0  # msec
                elif parts[2] == "raw_syscalls:sys_enter":
                    calls = v
    except OSError:
        return None, None
    return cpu, calls


def read_float(path):
    try:
        with open(path, encoding="utf-8") as f:
            return float(f.read().strip())
    except (OSError, ValueError):
        return None


def sockperf_result(path):
    """sockperf ping-pong --full-rtt: percentiles (us) of the round trip."""
    out = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    for key, pat in (("p50", r"percentile 50\.000\s*=\s*([0-9.]+)"),
                     ("p99", r"percentile 99\.000\s*=\s*([0-9.]+)"),
                     ("p999", r"percentile 99\.900\s*=\s*([0-9.]+)")):
        m = re.search(pat, text)
        if m:
            out[key] = float(m.group(1))
    return {"latency_us": out} if out else None


def ceiling_result(prefix):
    res = {}
    for side in ("send", "recv"):
        try:
            with open(prefix + "." + side, encoding="utf-8") as f:
                m = re.search(r"bytes (\d+) seconds ([0-9.]+) gbps ([0-9.]+)", f.read())
        except OSError:
            m = None
        if m:
            res[side + "_gbps"] = float(m.group(3))
    if "recv_gbps" not in res:
        return None
    res["gbps"] = res["recv_gbps"]
    return res


def per_run(line):
    path, mtu, proto, driver, test, run, prefix = line.split()
    r = {"path": path, "mtu": int(mtu), "proto": proto, "driver": driver, "test": test,
         "run": int(run)}
    if proto == "sockperf":
        res = sockperf_result(prefix)
    elif proto == "udp-ceiling":
        res = ceiling_result(prefix)
    else:
        res = last_json(prefix + ".client")
    if not res:
        r["error"] = "no result"
        return r
    if res.get("error"):
        r["error"] = res["error"]
    lat = res.get("latency_us") or {}
    for k in ("p50", "p99", "p999"):
        if lat.get(k) is not None:
            r[k + "_us"] = lat[k]
    if res.get("gbps") is not None:
        r["gbps"] = res["gbps"]
    if res.get("errors"):
        r["rpc_errors"] = res["errors"]
    win = read_float(prefix + ".win")
    gbps = r.get("gbps")
    for side, f in (("client", ".cstat"), ("server", ".sstat")):
        cpu, calls = perf_stat(prefix + f)
        if cpu is None or not win or not gbps:
            continue
        moved_gb = gbps * win / 8.0  # the bytes the window carried, in GB
        r["cpu_s_per_gb_" + side] = cpu / moved_gb if moved_gb > 0 else None
        r["cpu_util_" + side] = cpu / win
        if calls is not None:
            r["syscalls_per_mb_" + side] = calls / (moved_gb * 1000.0) if moved_gb > 0 else None
    return r


METRICS = ("gbps", "p50_us", "p99_us", "p999_us", "cpu_s_per_gb_client", "cpu_s_per_gb_server",
           "syscalls_per_mb_client", "syscalls_per_mb_server", "cpu_util_client",
           "cpu_util_server")


def medians(runs):
    groups = {}
    for r in runs:
        key = (r["path"], r["test"], r["proto"], r["driver"])
        groups.setdefault(key, []).append(r)
    out = []
    for (path, test, proto, driver), rs in groups.items():
        m = {"path": path, "mtu": rs[0]["mtu"], "test": test, "proto": proto, "driver": driver,
             "runs": len(rs), "failed_runs": sum(1 for r in rs if r.get("error"))}
        for k in METRICS:
            vals = [r[k] for r in rs if r.get(k) is not None]
            if vals:
                m[k] = statistics.median(vals)
        out.append(m)
    return out


def fmt(v, digits=3):
    if v is None:
        return "-"
    return f"{v:.{digits}g}" if abs(v) < 1000 else f"{v:.0f}"


def main(argv):
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        runs = [per_run(ln) for ln in f if ln.strip()]
    med = medians(runs)
    by = {(m["path"], m["test"], m["proto"], m["driver"]): m for m in med}
    paths = []
    for m in med:
        if m["path"] not in paths:
            paths.append(m["path"])
    ratios = []
    for path in paths:
        print(f"\n{path}: median of {max(m['runs'] for m in med if m['path'] == path)} runs")
        print(f"  {'test':14} {'proto':16} {'Gb/s':>7} {'p50 us':>8} {'p99 us':>8} {'p999 us':>8}"
              f" {'CPU s/GB c/s':>13} {'calls/MB c/s':>13}")
        for m in med:
            if m["path"] != path:
                continue
            name = m["proto"] + ("/" + m["driver"] if m["driver"] != "-" else "")
            cpu = f"{fmt(m.get('cpu_s_per_gb_client'))}/{fmt(m.get('cpu_s_per_gb_server'))}"
            calls = (f"{fmt(m.get('syscalls_per_mb_client'))}/"
                     f"{fmt(m.get('syscalls_per_mb_server'))}")
            print(f"  {m['test']:14} {name:16} {fmt(m.get('gbps')):>7} {fmt(m.get('p50_us')):>8}"
                  f" {fmt(m.get('p99_us')):>8} {fmt(m.get('p999_us')):>8} {cpu:>13} {calls:>13}")
        tests = sorted({m["test"] for m in med if m["path"] == path and m["proto"] == "homa"})
        for test in tests:
            tcp = by.get((path, test, "tcp", "-"))
            for m in med:
                if (m["path"], m["test"], m["proto"]) != (path, test, "homa") or not tcp:
                    continue
                rat = {"path": path, "test": test, "driver": m["driver"]}
                for k in ("gbps", "p50_us", "p99_us", "cpu_s_per_gb_client",
                          "cpu_s_per_gb_server"):
                    if m.get(k) and tcp.get(k):
                        rat[k] = m[k] / tcp[k]
                ref = by.get((path, test, "sockperf", "-"))
                if ref:
                    for k in ("p50_us", "p99_us"):
                        if m.get(k) and ref.get(k):
                            rat[k + "_vs_sockperf"] = m[k] / ref[k]
                ceil = by.get((path, "oneway", "udp-ceiling", "-"))
                if ceil and m.get("gbps") and ceil.get("gbps") and test.startswith("oneway"):
                    rat["gbps_vs_udp_ceiling"] = m["gbps"] / ceil["gbps"]
                ratios.append(rat)
                parts = [f"{k.replace('_us', '')} {v:.2f}" for k, v in rat.items()
                         if isinstance(v, float)]
                print(f"  ratio homa/{m['driver']} to TCP, {test}: {', '.join(parts)}")
    if len(argv) > 2 and argv[2]:
        doc = {"experiment": "link", "host": socket.gethostname(),
               "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
               "cpus": os.cpu_count(), "rate": argv[3] if len(argv) > 3 else "",
               "delay": argv[4] if len(argv) > 4 else "",
               "medians": med, "ratios": ratios, "runs": runs}
        with open(argv[2], "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
        print(f"\nJSON: {argv[2]}")
    bad = [r for r in runs if r.get("error") or r.get("rpc_errors")]
    if bad:
        print(f"\n{len(bad)} run(s) with errors: "
              + "; ".join(f"{r['path']} {r['test']} {r['proto']} run {r['run']}: "
                          f"{r.get('error') or str(r.get('rpc_errors')) + ' RPC errors'}"
                          for r in bad[:6]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
