# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Inject the traps a Spark sets into a simulated node (sim.yml -e '{"sim_traps": {...}}'; docs/simulated-cluster.md).

    sim_trap.py memory NODE_PID NAME BYTES   an entry of the node's GB10 memory ledger (gb10_memory.py): NAME
                                             cache-* (page cache) or other-* (memory a process holds); BYTES 0 removes it
    sim_trap.py hard-kill SOCK               SIGKILL every container of the collection on the node's daemon (docker
                                             kill: a GB10 keeps their ranks' memory pinned until a reboot)
    sim_trap.py missing-env SOCK VAR         make the node's Ray or vLLM container of the collection again, the same in
                                             every way (labels and config hash too) but without VAR, as a hand-made fix
    sim_trap.py disk-full FOLDER MB          mount a filesystem of MB megabytes (a tmpfs, so this machine's disk is never
                                             filled) on the node's FOLDER and fill it; MB 0 unmounts it. The node's disk
                                             is a shared mount (node.yml): the node and its daemon see it at once

Each prints {"changed": bool} and fails with a message naming the node's daemon and what is missing.
"""

import json
import os
import subprocess
import sys
import time

LEDGER = "dev/shm/dgx-spark-sim-gb10"
MANAGED = {"label": "dgx_spark.vllm.managed=true"}
GRACE = 4  # seconds: more than the GB10 stand-in waits to see how a rank's container ends (gb10_memory.DECIDE_AFTER)


def memory(node_pid, name, size):
    folder = "/proc/%d/root/%s" % (node_pid, LEDGER)
    path = os.path.join(folder, name)
    if not name.startswith(("cache-", "other-")) or "/" in name:
        sys.exit("a trap's memory entry is cache-* or other-*, got %r" % name)
    if size <= 0:
        if os.path.exists(path):
            os.unlink(path)
            return True
        return False
    entry = json.dumps({"kind": name.split("-", 1)[0], "bytes": size, "injected": True})
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read() == entry:
                return False
    except OSError:
        pass
    os.makedirs(folder, mode=0o1777, exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        handle.write(entry)
    os.rename(path + ".tmp", path)
    return True


def client(sock):
    import docker  # pylint: disable=import-outside-toplevel  # only these two traps need the SDK
    return docker.DockerClient(base_url="unix://" + sock)


def hard_kill(sock):
    running = client(sock).containers.list(filters=MANAGED)
    if not running:
        sys.exit("no container of the collection runs on the daemon at %s; serve first, then inject hard_kill" % sock)
    for container in running:
        container.kill()  # SIGKILL
    return True


def missing_env(sock, variable):
    docker = client(sock)
    ours = [c for c in docker.containers.list(all=True, filters=MANAGED)
            if c.labels.get("dgx_spark.vllm.role") in ("ray", "vllm")] or docker.containers.list(all=True, filters=MANAGED)
    if not ours:
        sys.exit("no container of the collection is on the daemon at %s; serve first, then inject missing_env" % sock)
    original = ours[0]
    config, host = original.attrs["Config"], original.attrs["HostConfig"]
    env = [e for e in config.get("Env") or [] if not e.startswith(variable + "=")]
    if env == (config.get("Env") or []):
        return False  # already without it
    was_running = original.status == "running"
    if was_running:  # end its vLLM ranks first, as the collection's teardown does: a rank ended with its container
        # (docker stop past its timeout, rm -f) is killed hard, and the GB10 stand-in rightly pins its memory
        original.exec_run(["sh", "-c", "pkill -TERM -f '^ray::RayWorker|VLLM::'; for i in $(seq 100); do "
                                       "pgrep -f '^ray::RayWorker|VLLM::' >/dev/null || exit 0; sleep 0.2; done"])
        time.sleep(GRACE)
    original.stop(timeout=30)
    original.remove()
    api = docker.api
    made = api.create_container(config["Image"], command=config.get("Cmd"), entrypoint=config.get("Entrypoint"),
                                environment=env, labels=config.get("Labels"), name=original.name,
                                host_config=host, working_dir=config.get("WorkingDir"), user=config.get("User") or None)
    if was_running:
        api.start(made["Id"])
    return True


DISK_FULL = "dgx-spark-sim-disk-full"  # the filesystem's source name: only a mount of ours is ever unmounted


def mounted_here(folder):
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        for line in handle:
            fields = line.split()
            source = fields[fields.index("-") + 2]
            if fields[4] == folder and source == DISK_FULL:
                return True
    return False


def disk_full(folder, megabytes):
    folder = os.path.realpath(folder)
    if megabytes <= 0:
        if not mounted_here(folder):
            return False
        subprocess.run(["umount", folder], check=True)
        return True
    if mounted_here(folder):
        return False
    os.makedirs(folder, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dm,mode=0755" % megabytes, DISK_FULL, folder], check=True)
    with open(os.path.join(folder, ".disk-full"), "wb") as handle:  # fill it: every block taken
        try:
            while True:
                handle.write(b"\0" * 1048576)
                handle.flush()
        except OSError:
            pass
    return True


def main(argv):
    action = argv[1]
    if action == "memory":
        changed = memory(int(argv[2]), argv[3], int(argv[4]))
    elif action == "hard-kill":
        changed = hard_kill(argv[2])
    elif action == "disk-full":
        changed = disk_full(argv[2], int(argv[3]))
    elif action == "missing-env":
        changed = missing_env(argv[2], argv[3])
    else:
        sys.exit("unknown trap action %r" % action)
    print(json.dumps({"changed": changed}))


if __name__ == "__main__":
    main(sys.argv)
