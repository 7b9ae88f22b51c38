# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A simulated node's GB10 unified memory: the /proc/meminfo and nvidia-smi's compute apps that a Spark would show.

Runs inside the node (started by its init, ended with it). Twice a second (and within 50 ms of a cache drop, or of a
process taking or leaving a lock) it writes ``<run>/meminfo`` (bound over
the node's /proc/meminfo) and ``<run>/compute-apps`` (what the stand-in nvidia-smi answers to --query-compute-apps),
from a captured idle GB10 (gb10_idle_meminfo.txt, 128 GB) and the entries of the node's ledger in /dev/shm:

- ``rank-*``: a running vLLM rank (dgx_spark_sim_gb10.hold) holds utilization x 119.67 GiB while it keeps the entry
  locked. Its memory is used and listed by nvidia-smi, as on a GB10 (invisible to RSS).
  When the rank is gone: if its container ended by SIGKILL or the OOM killer (the daemon's "die" event with exit
  code 137, or "oom": docker kill, docker rm -f, a stop that timed out), the memory stays pinned (``pinned``), as a
  GB10 keeps it until a reboot (fact 3); otherwise it is freed.
- ``pinned-*``: pinned memory. Used, listed nowhere, so the probe reports it unaccounted.
- ``cache-*``: page cache (weights read). Counted in Cached; MemAvailable loses min(cache / 2, 8 GiB) of it, about
  what a captured GB10 showed with 66 GB of weights cached. ``echo 3 > /proc/sys/vm/drop_caches`` on the node (bound
  to ``<run>/drop_caches``) drops it.
- ``other-*``: memory a process holds (AnonPages): a node that starts with less free memory than the others.

A reboot of the node (sim.yml -e sim_reboot=...) starts a fresh /dev/shm: nothing held, nothing pinned, no cache.

Usage: gb10_memory.py RUN_DIR            (in the node: loop)
       gb10_memory.py --idle MEMINFO     (on this machine: write the idle figures before the node starts)
"""

import fcntl
import json
import os
import re
import socket
import sys
import threading
import time
import urllib.parse

LEDGER = "/dev/shm/dgx-spark-sim-gb10"
BASE = os.environ.get("GB10_IDLE_MEMINFO", "/usr/local/share/dgx-spark-sim/gb10_idle_meminfo.txt")
KIB = 1024
CACHE_PENALTY_CAP = 8 * 1024 ** 3
DECIDE_AFTER = 3.0  # seconds a dead rank's container has to end before its memory counts as freed
COUNTS = ("HugePages_Total", "HugePages_Free", "HugePages_Rsvd", "HugePages_Surp")


def read_base(path=BASE):
    fields = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            name, dummy, rest = line.partition(":")
            if rest.strip():
                fields.append((name, int(rest.split()[0])))
    return fields


def render(base, entries):
    """meminfo text for the ledger ``entries`` ({kind: bytes}); fixed width, so every write has one length."""
    held = entries.get("rank", 0) + entries.get("pinned", 0) + entries.get("other", 0)
    cache = entries.get("cache", 0)
    penalty = min(cache // 2, CACHE_PENALTY_CAP)
    delta = {"MemFree": -(held + cache), "MemAvailable": -(held + penalty), "Cached": cache,
             "AnonPages": entries.get("other", 0), "Committed_AS": entries.get("other", 0)}
    lines = []
    for name, value in base:
        if name in COUNTS:
            lines.append("%-16s%12d" % (name + ":", value))
        else:
            lines.append("%-16s%12d kB" % (name + ":", max(0, value + delta.get(name, 0) // KIB)))
    return "\n".join(lines) + "\n"


def locked_by(path, locks):
    """The PID (in this node) holding the lock on ``path``, or None when nobody holds it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    found = os.fstat(fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    except BlockingIOError:
        return locks.get((os.major(found.st_dev), os.minor(found.st_dev), found.st_ino), 0)
    finally:
        os.close(fd)


def read_locks():
    """{(major, minor, inode): pid} of /proc/locks' FLOCK lines (the pids as this node sees them)."""
    held = {}
    try:
        with open("/proc/locks", encoding="utf-8") as handle:
            for line in handle:
                fields = line.split()
                if len(fields) >= 6 and fields[1] == "FLOCK":
                    major, minor, inode = fields[5].split(":")
                    held[(int(major, 16), int(minor, 16), int(inode))] = int(fields[4])
    except (OSError, ValueError, IndexError):
        pass
    return held


def container_of(pid):
    try:
        with open("/proc/%d/cgroup" % pid, encoding="utf-8") as handle:
            found = re.search(r"([0-9a-f]{64})", handle.read())
        return found.group(1) if found else None
    except OSError:
        return None


class Deaths(threading.Thread):
    """How the node's containers ended, from its Docker daemon's events ("die" carries the exit code, "oom" the OOM
    killer). Read as they happen, since teardown removes a container right after it stops. A container that starts
    again (its restart policy, a power cycle, ``docker start``) has not ended yet: its "start" forgets how it last
    ended, or a rank of its new run that dies later would be judged by the earlier death's code."""

    def __init__(self, sock="/var/run/docker.sock"):
        super().__init__(daemon=True)
        self.sock, self.codes, self.oom = sock, {}, set()

    def run(self):
        query = urllib.parse.quote(json.dumps({"type": ["container"], "event": ["start", "die", "oom"]}))
        while True:
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                client.connect(self.sock)
                client.sendall(("GET /events?filters=%s HTTP/1.1\r\nHost: docker\r\n\r\n" % query).encode())
                buffer = b""
                while True:
                    chunk = client.recv(65536)
                    if not chunk:
                        break
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        self.note(line.strip())
            except OSError:
                pass
            finally:
                client.close()
            time.sleep(1)  # the daemon is not up yet, or restarted

    def note(self, line):
        if not line.startswith(b"{"):
            return  # HTTP headers and chunk sizes
        try:
            event = json.loads(line)
        except ValueError:
            return
        actor = event.get("Actor") or {}
        if event.get("Action") == "start":
            self.oom.discard(actor.get("ID"))
            self.codes.pop(actor.get("ID"), None)
        elif event.get("Action") == "oom":
            self.oom.add(actor.get("ID"))
        elif event.get("Action") == "die":
            self.codes[actor.get("ID")] = int((actor.get("Attributes") or {}).get("exitCode") or 0)

    def killed_hard(self, container):
        """True: ended by SIGKILL or the OOM killer; False: ended otherwise; None: not seen ending (yet)."""
        if container in self.oom:
            return True
        if container in self.codes:
            return self.codes[container] == 137
        return None


def comm(pid):
    try:
        with open("/proc/%d/comm" % pid, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return "python3"


class Node:
    def __init__(self, run):
        self.run = run
        self.base = read_base()
        self.seen = {}  # rank entry -> {"pid", "container", "dead_since"}
        self.deaths = Deaths()
        self.deaths.start()

    def judge(self, path, name, entry, pid):
        """A rank entry counts as held while locked; once its rank is gone, as pinned when its container ended by
        SIGKILL or the OOM killer (docker kill, docker rm -f, a stop that timed out), else it is freed. Returns the
        kind it counts as (None: freed)."""
        known = self.seen.setdefault(name, {})
        if pid is not None:
            if pid and known.get("pid") != pid:
                container = container_of(pid)  # the node's own process (not in one of its containers): none
                known.update(pid=pid, container=None if container == container_of(os.getpid()) else container)
            return "rank"
        dead_since = known.setdefault("dead_since", time.time())
        hard = self.deaths.killed_hard(known["container"]) if known.get("container") else False
        if hard:
            pinned = dict(entry, kind="pinned", pinned_by="container %s ended by SIGKILL" % known["container"][:12])
            with open(os.path.join(LEDGER, ".pinning"), "w", encoding="utf-8") as handle:
                json.dump(pinned, handle)
            os.rename(os.path.join(LEDGER, ".pinning"), os.path.join(LEDGER, "pinned-" + name[len("rank-"):]))
        elif hard is None and time.time() - dead_since < DECIDE_AFTER:
            return "rank"  # its container may be ending
        os.unlink(path)
        self.seen.pop(name, None)
        return "pinned" if hard else None

    def tick(self, locks=None):
        """Rewrite meminfo and compute-apps from the ledger; ``locks``: /proc/locks as read_locks() just read it."""
        if not os.path.isdir(LEDGER):
            os.makedirs(LEDGER, exist_ok=True)
            os.chmod(LEDGER, 0o1777)
        self.drop_caches()
        totals, apps = {}, []
        locks = read_locks() if locks is None else locks
        names = sorted(os.listdir(LEDGER)) if os.path.isdir(LEDGER) else []
        for name in names:
            path = os.path.join(LEDGER, name)
            if name.startswith("."):
                continue
            try:
                with open(path, encoding="utf-8") as handle:
                    entry = json.load(handle)
            except (OSError, ValueError):
                continue
            kind = entry.get("kind")
            if kind == "rank":
                pid = locked_by(path, locks)
                kind = self.judge(path, name, entry, pid)
                if kind == "rank" and pid:
                    apps.append("%d, %s, %d" % (pid, comm(pid), entry["bytes"] // 1024 ** 2))
            if kind:
                totals[kind] = totals.get(kind, 0) + int(entry.get("bytes") or 0)
        write_in_place(os.path.join(self.run, "meminfo"), render(self.base, totals))
        write_in_place(os.path.join(self.run, "compute-apps"), "".join(a + "\n" for a in apps))

    def drop_caches(self):
        path = os.path.join(self.run, "drop_caches")
        try:
            with open(path, "r+", encoding="utf-8") as handle:
                wanted = handle.read().strip()
                if not wanted:
                    return
                handle.truncate(0)
        except OSError:
            return
        if wanted in ("1", "3") and os.path.isdir(LEDGER):
            for name in os.listdir(LEDGER):
                if name.startswith("cache-"):
                    os.unlink(os.path.join(LEDGER, name))


def write_in_place(path, text):
    """Rewrite ``path`` keeping its inode (a bind mount holds the inode, not the name)."""
    data = text.encode()
    with open(path, "ab") as handle:
        pass
    with open(path, "r+b") as handle:
        if handle.read() == data:
            return
        handle.seek(0)
        handle.write(data)
        handle.truncate(len(data))


def main(argv):
    if argv[1:2] == ["--idle"]:
        base = read_base(argv[3]) if len(argv) > 3 else read_base()
        write_in_place(argv[2], render(base, {}))
        return
    node = Node(argv[1])
    drop, last, locks = os.path.join(argv[1], "drop_caches"), 0.0, None
    # Every 0.5 s, and at once (within 50 ms) when caches are dropped or a lock comes or goes (a rank starts or ends):
    # the kernel drops caches synchronously and frees an ended process's memory as it exits; an OOM killer (earlyoom)
    # that still saw the memory held would end a second process.
    while True:
        try:
            now = read_locks()
            if time.monotonic() - last >= 0.5 or os.path.getsize(drop) > 0 or now != locks:
                node.tick(now)
                last, locks = time.monotonic(), now
        except Exception as exc:  # pylint: disable=broad-except  # a stand-in that stops would freeze the figures
            print("gb10_memory: %s" % exc, file=sys.stderr, flush=True)
        time.sleep(0.05)


if __name__ == "__main__":
    main(sys.argv)
