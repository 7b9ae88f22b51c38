# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A simulated node's own Docker daemon, run on this machine inside the node's namespaces.

A Spark has one Docker daemon; so does each simulated node. Its dockerd runs here (a container may not run one
without --privileged), entered into the node container's network, UTS, IPC and PID namespaces with nsenter (not `ip
netns exec`, which remounts /sys and hides the cgroups: "Devices cgroup isn't mounted"), in a mount namespace of its
own (a slave of this machine's, so a filesystem mounted later into the node's shared disk folder reaches it, as the
disk_full trap's does) with a /proc of the node's PID namespace, where the node's folders sit at a Spark's paths:

    <root>/nodes/<node>/var             -> /var/lib/dgx-spark-vllm   (state and models, as the node sees them too)
    <root>/nodes/<node>/dev/infiniband  -> /dev/infiniband           (stand-in device nodes, for --device)
    <root>/nodes/<node>/run/hosts       -> /etc/hosts                (the node's, as DGX OS writes it)
    <root>/nodes/<node>/certs.d         -> /etc/docker/certs.d       (the CAs the node's Docker trusts per registry: the
                                                                     simulated registry's, as the node sees them too)
    <root>/nodes/<node>/shm             -> /dev/shm                  (the node's own tmpfs, the node's /dev/shm too:
                                                                     shared by --ipc host, as on a Spark)
    tmpfs                               -> /run/containerd           (so dockerd starts a containerd of its own)
    the node's /usr/lib/<arch>/libnccl* -> the same path           (copied into an overlay of this machine's folder:
                                                                     the node's system NCCL, which vllm_nccl_library:
                                                                     system mounts into containers)

A container it starts with --network host --ipc host sees exactly the node's interfaces, addresses, name and shared
memory, and no other node's. Its processes are the node's: `ps` on the node lists them, as on a Spark, and when the
node stops (its init ends) the kernel ends every one of them, the daemon too: a power cut. The daemon is started in the
background of a shell that then ends, so the node's init (systemd) becomes its parent and reaps it, as on a Spark: a
parent outside the node (nsenter, which waits for its child) would be stopped with it by systemd's shutdown (which stops
every process of the node first, `kill(-1, SIGSTOP)`) and never continued, and a node whose daemon nobody reaps never
ends (`docker stop` then hangs: "did not receive an exit event").
The node's /proc/sys/vm/drop_caches is bound to <root>/nodes/<node>/run/drop_caches, which the node's GB10 memory
stand-in (gb10_memory.py) reads, so `echo 3 > /proc/sys/vm/drop_caches` on the node drops its simulated page cache.
`--gpus all` needs nvidia-container-runtime-hook on dockerd's PATH; the stand-in in <root>/bin does nothing (the
node has no GPU). The `nvidia` runtime a Spark's Docker lists (NVIDIA Container Toolkit) is runc here. Its images
live in <root>/stores/<node>, kept when the nodes are removed. A node made anew (its folders are new: this machine never had
it, or `state=absent` removed them) is a freshly installed Spark whose disk already holds the images, never a former
node's containers: those a run left in the store (one killed before `state=absent` removed them) are removed before
they can start again.

The node's interfaces get a Spark's names: the management NIC enP7s7, the fabric port enp1s0f1np1.

A power cut first takes the node's links away (`unplug`): a Spark without power sends nothing, while the kernel ends
a simulated node's processes by closing their sockets, which sends FINs. A FIN the new node's firewall drops (no
connection it knows: ``ct state invalid``) is sent again for minutes from the former node's network namespace, and so is
that namespace kept with its interfaces, the MAC addresses of the new node's and the renamed names Docker cannot find to
release: the networks' bridges then send the new node's traffic to the former one, which answers "connection refused".

Usage: node_daemon.py start ROOT NODE CONTAINER_PID MGMT_IP FABRIC_IP | stop ROOT NODE | unplug ROOT NODE
Prints {"changed": bool, "pid": int|null}.
"""

import glob
import json
import os
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time

SPARK_STATE = "/var/lib/dgx-spark-vllm"
CERTS_D = "/etc/docker/certs.d"  # Docker's per-registry trust, which the daemon reads
# The nodes' containers, each node's under a cgroup of its own below this one, which gets a low CPU weight (v1: 128 of a
# task's 1024 shares; v2: 12 of the default 100). On a Spark the controller is another machine; here it shares this
# machine's cores with every node, and each vLLM rank spins a core for a second after every request (vLLM's
# shm_broadcast busy loop). Weighted low, the nodes' work yields to the controller's, as if it ran on a machine of its
# own; with nothing else to run, the nodes still get every core.
NODES_CGROUP, CPU_SHARES, CPU_WEIGHT = "dgx-spark-sim", 128, 12
MGMT_IF, FABRIC_IF = "enP7s7", "enp1s0f1np1"  # a Spark's 10 GbE port and its ConnectX port on the fabric


def paths(root, node):
    base = os.path.join(root, "nodes", node)
    return {"base": base, "var": os.path.join(base, "var"), "dev": os.path.join(base, "dev", "infiniband"),
            "run": os.path.join(base, "run"), "sock": os.path.join(base, "run", "docker", "docker.sock"),
            "pidfile": os.path.join(base, "run", "dockerd.pid"), "hosts": os.path.join(base, "run", "hosts"), "log": os.path.join(base, "run", "dockerd.log"),
            "certs": os.path.join(base, "certs.d"), "drop_caches": os.path.join(base, "run", "drop_caches"),
            "attached": os.path.join(base, "run", "store"), "shm": os.path.join(base, "shm"),
            "data": os.path.join(root, "stores", node), "exec": "/run/dgx-spark-sim/%s" % node, "bin": os.path.join(root, "bin")}


def system_libraries(p, container_pid):
    """Shell that shows the daemon the node's system NCCL at the node's path (a container's mount of a host file is
    resolved by the daemon, which runs on this machine): this machine's library folder overlaid, in the daemon's own
    mount namespace, with a copy of the node's libnccl files. This machine's folder is left as it was. Empty where the
    node has none."""
    found = sorted(glob.glob("/proc/%d/root/usr/lib/*-linux-gnu/libnccl.so*" % container_pid))
    if not found:
        return ""
    folder = os.path.dirname(found[0])[len("/proc/%d/root" % container_pid):]
    upper, work = os.path.join(p["run"], "libs", "upper"), os.path.join(p["run"], "libs", "work")
    shutil.rmtree(os.path.join(p["run"], "libs"), ignore_errors=True)
    os.makedirs(upper)
    os.makedirs(work)
    return "mount -t overlay overlay -o %s %s && cp -a %s %s/ &&" % (
        shlex.quote("lowerdir=%s,upperdir=%s,workdir=%s" % (folder, upper, work)), shlex.quote(folder),
        " ".join(shlex.quote(f) for f in found), shlex.quote(folder))


def running_pid(p):
    """The node's dockerd on this machine, found by its data root (its pid file holds its pid in the node)."""
    for entry in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as handle:
                argv = handle.read().split(b"\0")
        except (OSError, ValueError):
            continue
        if argv[:1] == [b"dockerd"] and b"--data-root" in argv and argv[argv.index(b"--data-root") + 1:][:1] == [p["data"].encode()]:
            return int(entry)
    return None


def same_netns(pid, container_pid):
    try:
        return os.stat("/proc/%d/ns/net" % pid).st_ino == os.stat("/proc/%d/ns/net" % container_pid).st_ino
    except OSError:
        return False


def answers(sock):
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.settimeout(2)
        client.connect(sock)
        client.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
        return b"OK" in client.recv(256)
    except OSError:
        return False
    finally:
        client.close()


def stop(p):
    pid = running_pid(p)
    if pid is None:
        return False
    os.kill(pid, signal.SIGTERM)  # dockerd stops its containers, then its containerd
    for dummy in range(300):
        if running_pid(p) is None:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
    return True


def unplug(node):
    """Delete the node's interfaces but lo (each takes its other end on this machine's bridge with it)."""
    found = subprocess.run(["docker", "inspect", "--format", "{{.State.Pid}}", node], capture_output=True, text=True, check=False)
    pid = int(found.stdout.strip() or 0) if found.returncode == 0 else 0
    if not pid:
        return False  # not running: nothing of it is on the networks
    enter = ["nsenter", "--net=/proc/%d/ns/net" % pid, "ip"]
    links = subprocess.run(enter + ["-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in links.splitlines()]
    for name in names:
        if name != "lo":
            subprocess.run(enter + ["link", "del", name], check=True)
    return any(name != "lo" for name in names)


def rename_interfaces(container_pid, addresses):
    """Give the interface holding each address the name a Spark's has (``addresses``: ip -> name)."""
    enter = ["nsenter", "--net=/proc/%d/ns/net" % container_pid, "ip"]
    found = subprocess.run(enter + ["-o", "-4", "addr", "show"], capture_output=True, text=True, check=True).stdout
    for line in found.splitlines():
        fields = line.split()
        name, address = fields[1], fields[3].split("/")[0]
        wanted = addresses.get(address)
        if wanted and name != wanted:
            for argv in (["link", "set", name, "down"], ["link", "set", name, "name", wanted], ["link", "set", wanted, "up"]):
                subprocess.run(enter + argv, check=True)


def cpu_group(node, cgroups="/sys/fs/cgroup", systemd="/run/systemd/system"):
    """The --cgroup-parent of the node's dockerd (/dgx-spark-sim/<node>), its parent made with the nodes' low CPU weight
    (NODES_CGROUP). None, and the nodes share the cores evenly with the controller as they did before, where this
    machine runs systemd (its Docker's cgroup driver may be systemd's, which takes only a slice as a parent) or its CPU
    controller cannot be written."""
    if os.path.isdir(systemd):
        return None
    v2 = os.path.exists(os.path.join(cgroups, "cgroup.controllers"))
    root, name, value = ((cgroups, "cpu.weight", CPU_WEIGHT) if v2 else (os.path.join(cgroups, "cpu"), "cpu.shares", CPU_SHARES))
    if not v2 and not os.path.exists(os.path.join(root, name)):  # no cpu hierarchy: a folder there would weigh nothing
        return None
    folder = os.path.join(root, NODES_CGROUP)
    try:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, name), "w", encoding="utf-8") as handle:
            handle.write("%d\n" % value)
    except OSError:
        return None
    return "/%s/%s" % (NODES_CGROUP, node)


def make_devices(folder):
    """Stand-in RDMA device nodes (a Spark's uverbs and rdma_cm numbers) for --device /dev/infiniband; nothing opens
    them, since the simulated ranks talk over sockets."""
    os.makedirs(folder, exist_ok=True)
    for name, major, minor in (("rdma_cm", 10, 58), ("uverbs0", 231, 192), ("uverbs1", 231, 193), ("uverbs2", 231, 194),
                               ("uverbs3", 231, 195)):
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))


def bind_drop_caches(p, container_pid):
    """Bind the node's /proc/sys/vm/drop_caches (read-only in a container) to the file its memory stand-in reads."""
    with open(p["drop_caches"], "a", encoding="utf-8"):
        pass
    with open("/proc/%d/mountinfo" % container_pid, encoding="utf-8") as handle:
        mounts = handle.read()
    if " /proc/sys/vm/drop_caches " not in mounts:
        subprocess.run(["nsenter", "--target", str(container_pid), "--mount", "--pid", "--", "mount", "--bind",
                        "/run/dgx-spark-sim/drop_caches", "/proc/sys/vm/drop_caches"], check=True)


def booted(p, container_pid):
    """True once the node's systemd has started what it orders before Docker: its stand-in docker.service
    (node_docker_ready.sh) writes the start time of the node's init, which tells this boot's mark from the last one's."""
    try:
        with open("/proc/%d/stat" % container_pid, encoding="utf-8") as handle:
            started = handle.read().rsplit(")", 1)[1].split()[19]
        with open(os.path.join(p["run"], "booted"), encoding="utf-8") as handle:
            return handle.read().strip() == started
    except (OSError, IndexError):
        return False


def quiet_former_containers(p):
    """Before dockerd loads the store of a node made anew: clear the restart policy of every container a former node
    left there, so that none starts again (dockerd reads each container's hostconfig.json when it starts)."""
    folder = os.path.join(p["data"], "containers")
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        path = os.path.join(folder, name, "hostconfig.json")
        try:
            with open(path, encoding="utf-8") as handle:
                config = json.load(handle)
        except (OSError, ValueError):
            continue
        config["RestartPolicy"] = {"Name": "no", "MaximumRetryCount": 0}
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(config, handle)


def claim_store(p):
    """Mark the store as this node's (``<root>/nodes/<node>/run/store``, which goes with the node's folders); True when
    it was not yet, so its former containers are to go. A power cycle keeps the node's folders, so the mark: its
    containers stay, as a Spark's do. The mark is written before the daemon starts, so a failure later never makes this
    node's own containers look like a former node's."""
    if os.path.exists(p["attached"]):
        return False
    with open(p["attached"], "w", encoding="utf-8") as handle:
        handle.write(p["data"] + "\n")
    return True


def remove_former_containers(p):
    """Remove every container a former node left in the store (best effort: one that stays has no restart policy)."""
    docker = ["docker", "-H", "unix://" + p["sock"]]
    left = subprocess.run(docker + ["ps", "--all", "--quiet"], capture_output=True, text=True, check=False).stdout.split()
    if left:
        subprocess.run(docker + ["rm", "--force"] + left, capture_output=True, check=False)


def node_group_id(container_pid, name):
    """The ID of group ``name`` in the node's own /etc/group (its image's), or None when it has none. The daemon runs
    in this machine's files, so a group name would be looked up here."""
    try:
        with open("/proc/%d/root/etc/group" % container_pid, encoding="utf-8") as handle:
            for line in handle:
                fields = line.strip().split(":")
                if len(fields) >= 3 and fields[0] == name and fields[2].isdigit():
                    return int(fields[2])
    except OSError:
        return None
    return None


def start(p, node, container_pid, addresses):
    for dummy in range(300):  # Docker starts after the firewall, as on a Spark, so Ray's ports are never open
        if booted(p, container_pid):
            break
        time.sleep(0.1)
    else:
        sys.exit("%s's init did not finish its boot (%s/booted) within 30 s" % (node, p["run"]))
    anew = not os.path.exists(p["attached"])
    if anew:
        quiet_former_containers(p)
        claim_store(p)
    shutil.rmtree(p["exec"], ignore_errors=True)  # a Spark's /run is a tmpfs: a node that starts again finds it empty
    if os.path.exists(p["pidfile"]):  # its pid is in the node's PID namespace, where another process may hold it now
        os.unlink(p["pidfile"])
    for folder in (p["var"], p["dev"], os.path.dirname(p["sock"]), p["data"], p["exec"], p["certs"]):
        os.makedirs(folder, exist_ok=True)
    for mountpoint in (SPARK_STATE, "/dev/infiniband", "/run/containerd", CERTS_D):  # folders to mount on, this machine's
        os.makedirs(mountpoint, exist_ok=True)
    rename_interfaces(container_pid, addresses)
    with open(p["hosts"], "w", encoding="utf-8") as handle:  # as DGX OS writes it: the node's name on 127.0.1.1
        handle.write("127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n" % node)
    bind_drop_caches(p, container_pid)
    libs = system_libraries(p, container_pid)
    script = ('%s mount --bind "$4" /dev/shm && mount -t proc proc /proc && mount -t tmpfs tmpfs /run/containerd '
              '&& mount --bind "$1" %s && mount --bind "$2" /dev/infiniband && mount --bind "$3" /etc/hosts '
              '&& mount --bind "$5" %s && shift 5 && { "$@" & }' % (libs, SPARK_STATE, CERTS_D))
    argv = ["nsenter", "--net=/proc/%d/ns/net" % container_pid, "--uts=/proc/%d/ns/uts" % container_pid,
            "--ipc=/proc/%d/ns/ipc" % container_pid, "--pid=/proc/%d/ns/pid" % container_pid, "--",
            "unshare", "--mount", "--propagation", "slave", "--", "sh", "-c", script, "sh", p["var"], p["dev"], p["hosts"],
            p["shm"], p["certs"],
            "dockerd", "--data-root", p["data"], "--exec-root", p["exec"], "--pidfile", p["pidfile"],
            "--host", "unix://" + p["sock"], "--add-runtime", "nvidia=runc", "--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-masq=false"]
    docker_gid = node_group_id(container_pid, "docker")
    if docker_gid is not None:  # the node's docker group may use the socket, as on DGX OS (its SSH user is a member)
        argv += ["--group", str(docker_gid)]
    group = cpu_group(node)
    if group:
        argv += ["--cgroup-parent", group]
    env = dict(os.environ, PATH=p["bin"] + os.pathsep + os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"))
    with open(p["log"], "ab") as log:
        subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True)  # pylint: disable=consider-using-with
    for dummy in range(300):
        if answers(p["sock"]):
            if anew:
                remove_former_containers(p)
            return running_pid(p)
        time.sleep(0.1)
    with open(p["log"], encoding="utf-8", errors="replace") as handle:
        tail = handle.read()[-2000:]
    sys.exit("the Docker daemon of %s did not answer on %s within 30 s; the end of %s:\n%s" % (p["sock"], p["sock"], p["log"], tail))


def main(argv):
    action, root, node = argv[1], argv[2], argv[3]
    p = paths(root, node)
    if action == "stop":
        print(json.dumps({"changed": stop(p), "pid": None}))
        return
    if action == "unplug":
        print(json.dumps({"changed": unplug(node), "pid": None}))
        return
    container_pid = int(argv[4])
    addresses = {argv[6]: FABRIC_IF, argv[5]: MGMT_IF}  # a ring's node has no fabric network: the management address is Ray's
    make_devices(p["dev"])
    pid = running_pid(p)
    if pid and same_netns(pid, container_pid) and answers(p["sock"]):
        claim_store(p)  # a daemon answering in this node's namespace serves this node: its containers are this node's
        print(json.dumps({"changed": False, "pid": pid}))
        return
    stop(p)  # a daemon left in the namespace of a node that was restarted serves nothing there
    print(json.dumps({"changed": True, "pid": start(p, node, container_pid, addresses)}))


if __name__ == "__main__":
    main(sys.argv)
