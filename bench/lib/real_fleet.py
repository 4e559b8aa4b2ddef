#!/usr/bin/env python3
"""The figures of bench/real-fleet.sh, read from what each case left behind.

    real_fleet.py case NAME DIR           prints one case's figures, writes DIR/figures.json
    real_fleet.py compare DIR_A DIR_B     prints A's figures over B's (the ratios)
    real_fleet.py usage STATE NAME...     memory and CPU of the nodes' processes, now

`case` reads, in DIR: run/summary.json (keadm-batch's), nodes.json (`kubectl get nodes -o
json` after the run), names (the fleet's node names, one a line), time (GNU time's `%e %M`
of keadm-batch), samples (`<unix time> <load1> <MemAvailable MiB>` every 2 s during the
run), counts (`key=value` lines the script counted in the logs: the bastion's and
cloudcore's), busy (the machine's busy CPU seconds before and after the run).

Per node to Ready is summary.json's `cluster.ready_after_start`: from the node's start
(before its connect) to its Node Ready, on the control host's clock. A node that never got
there has no such figure; it counts in `not Ready`, with its failure class and error.
"""

import json
import os
import statistics
import sys


def median(values):
    return statistics.median(values) if values else None


def fmt(value, unit="s", digits=1):
    return "-" if value is None else f"{value:.{digits}f} {unit}".rstrip()


def read_counts(path):
    counts = {}
    if os.path.exists(path):
        for line in open(path):
            key, _, value = line.strip().partition("=")
            if key:
                counts[key] = int(value or 0)
    return counts


def ready_in_kubectl(nodes_json, names):
    """Names whose Node has Ready=True in `kubectl get nodes -o json`."""
    ready = set()
    for item in nodes_json.get("items", []):
        name = item["metadata"]["name"]
        if name not in names:
            continue
        for cond in item.get("status", {}).get("conditions", []):
            if cond.get("type") == "Ready" and cond.get("status") == "True":
                ready.add(name)
    return ready


def case(name, d):
    names = [n for n in open(os.path.join(d, "names")).read().split() if n]
    summary_path = os.path.join(d, "run", "summary.json")
    summary = json.load(open(summary_path)) if os.path.exists(summary_path) else {"nodes": [], "totals": {}}
    try:
        nodes_json = json.load(open(os.path.join(d, "nodes.json")))
    except (OSError, ValueError):
        nodes_json = {}
    # GNU time's last line (a failed command's "Command exited with non-zero status" comes first).
    lines = [line for line in open(os.path.join(d, "time")).read().splitlines() if line.strip()]
    wall, rss_kib = (lines[-1].split() + ["0", "0"])[:2] if lines else ("0", "0")
    counts = read_counts(os.path.join(d, "counts"))
    samples = [line.split() for line in open(os.path.join(d, "samples")) if len(line.split()) == 3]
    busy0, busy1 = (float(x) for x in open(os.path.join(d, "busy")).read().split())

    nodes = summary["nodes"]
    to_ready = {n["name"]: n["cluster"]["ready_after_start"] for n in nodes
                if isinstance(n.get("cluster"), dict) and "ready_after_start" in n["cluster"]}
    slowest = max(to_ready, key=to_ready.get) if to_ready else None
    steps = {}
    for step in ("connect", "prepare", "upload", "run"):
        steps[step] = median([n["steps"][step] for n in nodes if n.get("steps", {}).get(step) is not None])
    attempts = sum(n.get("connect_attempts", 0) for n in nodes)
    kubectl_ready = ready_in_kubectl(nodes_json, set(names))
    succeeded = summary["totals"].get("succeeded", 0)
    failed = [n for n in nodes if n.get("phase") != "succeeded"]
    loads = [float(s[1]) for s in samples]
    avail = [int(s[2]) for s in samples]
    wall = float(wall)

    print(f"    nodes Ready: {len(kubectl_ready)}/{len(names)} in kubectl, "
          f"{succeeded}/{len(names)} succeeded in summary.json (Ready within --ready-timeout)")
    print(f"    wall time: {wall:.1f} s (keadm-batch, from its start to the last node Ready), "
          f"peak RSS {int(rss_kib) / 1024:.1f} MiB, exit {counts.get('exit', '?')}")
    print(f"    per node to Ready (from its start): median {fmt(median(list(to_ready.values())))}, "
          f"slowest {fmt(to_ready.get(slowest))}" + (f" ({slowest})" if slowest else ""))
    print("    per node steps (median): " + ", ".join(f"{k} {fmt(v)}" for k, v in steps.items()))
    sent = median([n.get("bytes_uploaded", 0) for n in nodes])
    skipped = sum(n.get("uploads_skipped", 0) for n in nodes)
    print(f"    connect attempts: {attempts} for {len(nodes)} nodes; sent per node (median): "
          f"{fmt(sent and sent / 1e6, 'MB')}, uploads skipped: {skipped}")
    print(f"    bastion: {counts.get('bastion_auth', 0)} authentications (Accepted lines), "
          f"{counts.get('bastion_conn', 0)} connections, "
          f"{counts.get('bastion_drop', 0)} dropped past MaxStartups")
    print(f"    cloudcore log during the run: {counts.get('cc_lines', 0)} lines, "
          f"{counts.get('cc_errors', 0)} at error level (besides 'Query lease ... not found', which each "
          f"new node gets until its lease exists), {counts.get('cc_limit', 0)} 'reach node limit'")
    print(f"    machine during the run: {busy1 - busy0:.0f} CPU-s busy ({(busy1 - busy0) / max(wall, 0.01):.2f} cores on average), "
          f"load1 max {max(loads, default=0):.1f}, MemAvailable min {min(avail, default=0)} MiB")
    for n in failed:
        print(f"    NOT READY {n['name']}: {n.get('phase')} in {n.get('failed_in', '?')}, "
              f"class {n.get('failure_class', '?')}: {n.get('error', '')}")

    figures = {
        "case": name, "nodes": len(names), "kubectl_ready": len(kubectl_ready),
        "succeeded": succeeded, "wall": wall, "rss_mib": int(rss_kib) / 1024,
        "ready_median": median(list(to_ready.values())),
        "ready_slowest": to_ready.get(slowest), "attempts": attempts,
        "bastion_auth": counts.get("bastion_auth", 0),
        "cpu_s": busy1 - busy0,
        "load_max": max(loads, default=0), "avail_min": min(avail, default=0),
    }
    json.dump(figures, open(os.path.join(d, "figures.json"), "w"))


def compare(a_dir, b_dir):
    a = json.load(open(os.path.join(a_dir, "figures.json")))
    b = json.load(open(os.path.join(b_dir, "figures.json")))

    def ratio(key):
        return f"{a[key] / b[key]:.2f}x" if a.get(key) and b.get(key) else "-"

    print(f"==> {a['case']} / {b['case']}: wall {ratio('wall')}, per node to Ready median "
          f"{ratio('ready_median')}, slowest {ratio('ready_slowest')}, peak RSS {ratio('rss_mib')}, "
          f"machine CPU {ratio('cpu_s')}")
    print(f"real-fleet: nodes={a['nodes']} ready_{a['case']}={a['kubectl_ready']} "
          f"ready_{b['case']}={b['kubectl_ready']} wall_ratio={ratio('wall').rstrip('x')} "
          f"bastion_auth={a['bastion_auth']}")


def proc_stat(pid):
    """(utime + stime in ticks, VmRSS in KiB) of one process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        rss = 0
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
        return int(fields[11]) + int(fields[12]), rss
    except (OSError, IndexError, ValueError):
        return None


def usage(state, names):
    """The nodes' processes: each node's pid namespace (its sshd, edgecore, what keadm
    started) and its containerd's mount namespace (containerd, its shims), CPU over 10 s."""
    import time

    def ns(pid, kind):
        try:
            return os.readlink(f"/proc/{pid}/ns/{kind}")
        except OSError:
            return None

    wanted = set()
    for name in names:
        d = os.path.join(state, "nodes", name)
        for pidfile, kind in (("sshd.pid", "pid"), ("containerd.pid", "mnt")):
            try:
                pid = open(os.path.join(d, pidfile)).read().strip()
            except OSError:
                continue
            n = ns(pid, kind)
            if n:
                wanted.add((kind, n))
    host_mnt = ns(1, "mnt")
    wanted.discard(("mnt", host_mnt))

    def ours():
        pids = []
        for pid in os.listdir("/proc"):
            if pid.isdigit() and (("pid", ns(pid, "pid")) in wanted or ("mnt", ns(pid, "mnt")) in wanted):
                pids.append(pid)
        return pids

    def comm(pid):
        try:
            return open(f"/proc/{pid}/comm").read().strip()
        except OSError:
            return "?"

    before = {pid: proc_stat(pid) for pid in ours()}
    t0 = time.time()
    time.sleep(10)
    elapsed = time.time() - t0
    by_comm = {}
    ticks = os.sysconf("SC_CLK_TCK")
    for pid in ours():
        now = proc_stat(pid)
        if not now:
            continue
        cpu0 = before.get(pid, (now[0], 0))
        entry = by_comm.setdefault(comm(pid), [0, 0, 0.0])
        entry[0] += 1
        entry[1] += now[1]
        entry[2] += (now[0] - (cpu0[0] if cpu0 else now[0])) / ticks
    total_rss = sum(e[1] for e in by_comm.values())
    total_cpu = sum(e[2] for e in by_comm.values())
    print(f"    the {len(names)} joined nodes, idle: {total_rss / 1024:.0f} MiB RSS, "
          f"{total_cpu / elapsed:.2f} cores ({total_cpu / elapsed / max(len(names), 1) * 100:.1f} % of a core per node)")
    for c, (count, rss, cpu) in sorted(by_comm.items(), key=lambda kv: -kv[1][1])[:5]:
        print(f"      {c}: {count} processes, {rss / 1024:.0f} MiB, {cpu / elapsed:.2f} cores")


if __name__ == "__main__":
    if sys.argv[1] == "case":
        case(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "compare":
        compare(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "usage":
        usage(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(f"usage: {sys.argv[0]} case NAME DIR | compare DIR_A DIR_B | usage STATE NAME...")
