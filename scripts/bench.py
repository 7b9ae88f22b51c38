# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmarks that print figures (make bench). Targets are printed beside the figures; nothing asserts.

  probes        each probe module's run time (module process only, on this machine), target < 1 s
  planner       planning an 8-node cluster, target < 1 s
  sim           warm sim.yml with the images present, every step (target <= 60 s), then only the traps; disk used;
                --cold also rebuilds
  orchestration serve.yml from scratch against the bare bring-up on the same images (target <= 1.15x), a
                no-change re-run with its per-task profile (target <= 4 s, 0 changed, nothing written), teardown.yml
                (target <= 6 s); then two deployments on the same two nodes (inventories/sim-models, monitoring off
                like the single cluster): their no-change run against the single one's (target <= 1.5x), and the
                same with Prometheus on
  compile       vLLM's start with a cold and with a warm compile cache (sim_tiny compiled, its --enforce-eager taken out):
                serve.yml after a teardown, its containers recreated each time, and vLLM's own engine start
  plan8         probe and plan for 8 simulated nodes (target <= 15 s)
  model         a 4 GiB model (2 shards) through the model role: fetch on the head from the simulated hub, copy
                head -> worker against a raw tar stream between the same nodes (target >= 0.9x), a no-change run
  distribution  the image role's docker save | ssh | docker load of the runtime image, head -> worker, against the
                same raw stream typed by hand between the same nodes (target >= 0.9x)

Times are medians of --runs N runs (default 1; the closing figures use 3), each run's figure printed too.

Usage: scripts/bench.py [probes] [planner] [sim] [orchestration] [compile] [plan8] [model] [distribution] [--cold] [--runs N]
"""

import calendar
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".collections"))
sys.path.insert(0, os.path.join(ROOT, "tests", "unit"))
ENV = dict(os.environ, PATH=os.path.join(ROOT, ".venv", "bin") + os.pathsep + os.environ["PATH"],
           ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), PYTHONPATH=os.path.join(ROOT, ".collections"))
SIM_ROOT = "/var/lib/dgx-spark-sim"


def line(name, value, unit, target=None):
    print("  %-58s %10s %-4s %s" % (name, value, unit, ("target " + target) if target else ""))


RUNS = 1


def median_of(figures):
    """The median of a figure's runs and the runs themselves, for the printed line."""
    runs = [f for f in figures if f is not None]
    if not runs:
        return None, ""
    return statistics.median(runs), ("median of %d: %s" % (len(runs), ", ".join("%.1f" % f for f in runs)) if len(runs) > 1 else "")


def timed(argv, log=None):
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    seconds = time.monotonic() - started
    if log:
        with open(log, "w", encoding="utf-8") as handle:
            handle.write(proc.stdout)
    if proc.returncode != 0:
        sys.exit("bench: %s failed (rc=%d):\n%s" % (" ".join(argv), proc.returncode, proc.stdout[-3000:]))
    return seconds, proc.stdout


def node_socket(node):
    return "unix://%s/nodes/%s/run/docker/docker.sock" % (SIM_ROOT, node)


def run_module(name, args, runs=5, env=None):
    """Run a module as Ansible does on a node (its own Python process, arguments as JSON), ``runs`` times."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, handle)
    path = os.path.join(ROOT, "plugins", "modules", name + ".py")
    times = []
    for dummy in range(runs):
        started = time.monotonic()
        proc = subprocess.run([sys.executable, path, handle.name], env=dict(ENV, **(env or {})), capture_output=True, text=True,
                              check=False)
        times.append(time.monotonic() - started)
        if '"failed": true' in proc.stdout:
            return None, proc.stdout[-300:]
    os.unlink(handle.name)
    return times, None


def bench_probes():
    print("Probes (each module as its own process, %s):" % sys.executable)
    sysfs = os.path.join(SIM_ROOT, "nodes", "sim-head", "sys")
    smi = os.path.join(ROOT, "roles", "sim_cluster", "files", "nvidia-smi")
    cases = [("unified_memory_info", {"nvidia_smi": smi if os.path.exists(smi) else "nvidia-smi", "gpu_memory_utilization": 0.8}),
             ("roce_gid_info", {"sysfs_root": sysfs if os.path.exists(sysfs) else "/sys"}),
             ("ray_cluster_info", {"container": "dgx-spark-ray-sim-head", "expected_nodes": 2}),
             ("vllm_image_info", {"image": "dgx-spark-sim/runtime:sim", "cache_dir": os.path.join(tempfile.gettempdir(), "bench-image-info")})]
    for name, args in cases:  # Ray runs in the head's own daemon
        times, error = run_module(name, args, env={"DOCKER_HOST": node_socket("sim-head")} if name == "ray_cluster_info" else None)
        if times is None:
            line(name, "n/a", "", "(%s)" % error.strip().splitlines()[-1][:80])
            continue
        line("%s median of %d (min %.2f s)" % (name, len(times), min(times)), "%.2f" % statistics.median(times), "s",
             "< 1 s" + (" (first run reads the image: %.1f s)" % times[0] if name == "vllm_image_info" else ""))


def bench_planner():
    from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import planner, profiles
    from helpers import SPARKS, image_facts, memory_facts, roce_facts

    profile = profiles.load(os.path.join(ROOT, "profiles", "minimax_m25_nvfp4_ep.yml"))
    profile["parallel"].update(tensor=8, nodes=8)
    profile["model"]["config"]["num_key_value_heads"] = 8
    work = tempfile.mkdtemp()
    nodes = {}
    for index in range(8):
        name, dummy, capture = SPARKS[index % len(SPARKS)]
        nodes["spark%d" % (index + 1)] = {"fabric_ip": "192.168.100.%d" % (10 + index), "fabric_interfaces": ["enp1s0f1np1"],
                                          "memory": memory_facts("gb10-idle.txt"), "image": image_facts(),
                                          "roce": roce_facts(capture, os.path.join(work, str(index)))}
        for port in nodes["spark%d" % (index + 1)]["roce"]["roce_devices"]:
            port["ipv4_addresses"] = ["192.168.100.%d" % (10 + index)] if port["state"] == "ACTIVE" else []
    inputs = {"head_hosts": ["spark1"], "order": sorted(nodes, key=lambda n: int(n[5:])), "nodes": nodes, "profile": profile,
              "backend": "ray", "settings": {"image": "nvcr.io/nvidia/vllm:26.09-py3"}, "image_info": image_facts()}
    times = []
    for dummy in range(20):
        started = time.perf_counter()
        plan = planner.make_plan(inputs)
        times.append(time.perf_counter() - started)
    print("Planner:")
    line("plan an 8-node cluster (median of 20; ok=%s)" % plan["ok"], "%.4f" % statistics.median(times), "s", "< 1 s")


def docker_disk():
    out = subprocess.run(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}} {{.Size}}", "dgx-spark-sim/*"],
                         capture_output=True, text=True, check=False).stdout
    du = subprocess.run(["du", "-sh", SIM_ROOT], capture_output=True, text=True, check=False).stdout.split("\t")[0]
    return out.strip().splitlines(), du


def bench_sim(cold):
    print("Simulated cluster:")
    if cold:
        timed(["ansible-playbook", "playbooks/teardown.yml"])
        timed(["ansible-playbook", "playbooks/sim.yml", "-e", "sim_state=absent", "-e", "sim_cluster_purge=true"])
        seconds, dummy = timed(["ansible-playbook", "playbooks/sim.yml"])
        line("cold sim.yml (debootstrap, both images, the model)", "%.0f" % seconds, "s")
    stamp = os.path.join(SIM_ROOT, "nodes", "stamp.json")  # without its record, a run checks every step

    def every_step():
        if os.path.lexists(stamp):
            os.unlink(stamp)
        return timed(["ansible-playbook", "playbooks/sim.yml"])[0]

    warm, runs = median_of([every_step() for dummy in range(RUNS)])
    line("warm sim.yml, images present, every step checked", "%.1f" % warm, "s", "<= 60 s " + runs)
    standing, runs = median_of([timed(["ansible-playbook", "playbooks/sim.yml"])[0] for dummy in range(RUNS)])
    line("sim.yml again, the cluster as the last run left it (only the traps run)", "%.1f" % standing, "s", runs)
    images, du = docker_disk()
    for image in images:
        line("image " + image.split()[0], image.split()[1], "")
    line("%s (model, node folders)" % SIM_ROOT, du, "")


def vllm_startup_seconds(log_text, started_at):
    """vLLM's own start-up: from its process start (vllm_process's state file) to the last timestamped log
    line before 'Application startup complete' (vLLM logs local time, UTC here, to the second)."""
    last = None
    for text in log_text.split("Application startup complete")[0].splitlines():
        match = re.search(r"(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)", text)
        if match:
            last = match.groups()
    if last is None:
        return None
    year = time.gmtime(started_at).tm_year
    ready = calendar.timegm(time.strptime("%d-%s-%s %s:%s:%s" % ((year,) + last), "%Y-%m-%d %H:%M:%S"))
    return ready + 1 - started_at  # the log's second is rounded down


def docker_run_argv(spec, node):
    """`docker run` for a planned container spec on its node: what a user's shell script would type, nothing more."""
    argv = ["docker", "-H", node_socket(node), "run", "-d", "--name", spec["name"], "--network", spec["network_mode"],
            "--ipc", spec["ipc_mode"], "--init"]
    if spec.get("shm_size"):
        argv += ["--shm-size", spec["shm_size"]]
    for key, value in sorted(spec["env"].items()):
        argv += ["-e", "%s=%s" % (key, value)]
    for volume in spec["volumes"]:
        argv += ["-v", volume]
    for device in spec.get("devices") or []:
        argv += ["--device", device]
    for cap in spec.get("capabilities") or []:
        argv += ["--cap-add", cap]
    if spec.get("gpus"):
        argv += ["--gpus", spec["gpus"]]
    for limit in spec.get("ulimits") or []:
        name, soft, hard = limit.split(":")
        argv += ["--ulimit", "%s=%s:%s" % (name, soft, hard)]
    return argv + [spec["image"]] + spec["command"]


def chat_once(url, key, model, timeout):
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4}).encode()
    request = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                if response.status == 200:
                    return True
        except Exception:  # pylint: disable=broad-except
            pass
        time.sleep(0.5)
    return False


def bare_command(command, listen):
    """The plan's vLLM command as a user's script types it (the write-ups' way): vLLM on the endpoint's TCP port itself,
    with no front door in front, instead of the door's socket. A user's script skips nothing else the launch does."""
    argv = list(command)
    if "--uds" in argv:
        at = argv.index("--uds")
        host, port = listen.rsplit(":", 1)
        argv[at:at + 2] = ["--host", host, "--port", port]
    return argv


def bare_bringup(plan):
    """The bare bring-up on the same images: two containers, Ray head and worker, `vllm serve` inside the head,
    timed to the first completion. The plan of the last serve.yml gives the specs, so nothing differs but the tool."""
    head = plan["head"]
    specs = [(plan["nodes"][n]["containers"][0], n) for n in plan["nodes_order"]]
    serve = plan["nodes"][head]["serve"]
    endpoint = plan["cluster"]["endpoint"]
    with open(endpoint["api_key_file"], encoding="utf-8") as handle:
        key = handle.read().strip()
    on_head = ["docker", "-H", node_socket(head)]
    started, ok = time.monotonic(), False
    try:
        for spec, node in specs:
            subprocess.run(docker_run_argv(spec, node), check=True, capture_output=True)
        for dummy in range(600):
            out = subprocess.run(on_head + ["exec", specs[0][0]["name"], "ray", "status"], capture_output=True, text=True, check=False).stdout
            if out.count("node_") >= len(specs):
                break
            time.sleep(0.5)
        subprocess.run(on_head + ["exec", "-d", specs[0][0]["name"], "sh", "-c", "exec \"$@\" >> /dgx-spark/logs/vllm.log 2>&1", "sh"]
                       + bare_command(serve["command"], plan["cluster"]["door"]["listen"]), check=True)
        ok = chat_once(endpoint["url"], key, endpoint["served_model_name"], 1800)
        seconds = time.monotonic() - started
    finally:
        # Taken down as a user would, whatever happened (containers without our labels would make the next serve.yml
        # refuse): vLLM first (TERM, as Ctrl-C), then the containers. A docker rm -f would kill the ranks hard, and on a
        # GB10 (and its stand-in here) their memory would stay pinned until a reboot.
        subprocess.run(on_head + ["exec", specs[0][0]["name"], "sh", "-c", "pkill -TERM -f 'vllm serve'; "
                                  "for i in $(seq 120); do pgrep -f 'vllm serve' >/dev/null || exit 0; sleep 0.5; done"],
                       capture_output=True, check=False)
        for spec, node in specs:
            subprocess.run(["docker", "-H", node_socket(node), "stop", "--time", "60", spec["name"]], capture_output=True, check=False)
            subprocess.run(["docker", "-H", node_socket(node), "rm", spec["name"]], capture_output=True, check=False)
    return seconds if ok else None


def profile_tasks(argv, top=12):
    """Run a playbook with ansible.posix.profile_tasks; return its seconds and the slowest tasks."""
    env = dict(ENV, ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks", PROFILE_TASKS_TASK_OUTPUT_LIMIT=str(top))
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit("bench: %s failed:\n%s" % (" ".join(argv), proc.stdout[-3000:]))
    recap = proc.stdout.split("TASKS RECAP", 1)[-1].splitlines()
    tasks = [line for line in recap if re.search(r" -+ \d+\.\d+s$", line)]
    return seconds, tasks, proc.stdout


def sim_plan():
    """The simulated cluster's one deployment, as serve.yml planned it (the whole cluster, under its own name)."""
    with open(os.path.join(ROOT, "inventories", "sim", ".artifacts", "plan.json"), encoding="utf-8") as handle:
        whole = json.load(handle)
    return whole["deployments"][whole["deployment_order"][0]]


NODES = ("sim-head", "sim-worker1")
# What a run may write on a node: the state folders and the units; what the running processes write meanwhile (their
# logs) is told apart by a window of the same length without a run. Prometheus's database is its own, written on its
# own schedule (a rule evaluated every minute may fall outside the window): never a run's.
WATCHED = ("/var/lib/dgx-spark-vllm", "/etc/systemd/system", "/etc/netplan")
PROMETHEUS_DATA = "/monitoring/data/"


def snapshot():
    """Every file a run could write (each node's state folders and units, the node's containers and image tags, the
    controller's reports and secrets): path -> (mtime, size) or id."""
    seen = {}
    for node in NODES:
        out = subprocess.run(["docker", "exec", node, "find", *WATCHED, "-type", "f", "-printf", "%p %T@ %s\\n"],
                             capture_output=True, text=True, check=False).stdout
        seen.update({"%s:%s" % (node, l.rsplit(" ", 2)[0]): tuple(l.rsplit(" ", 2)[1:]) for l in out.splitlines()
                     if l and PROMETHEUS_DATA not in l})
        for what, argv in (("containers", ["ps", "-a", "--no-trunc", "--format", "{{.Names}} {{.ID}}"]),
                           ("images", ["images", "--no-trunc", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}"])):
            out = subprocess.run(["docker", "-H", node_socket(node), *argv], capture_output=True, text=True, check=False).stdout
            seen.update({"%s:%s %s" % (node, what, l.split(" ")[0]): l.split(" ")[-1] for l in out.splitlines() if l})
    for folder in (".artifacts", ".secrets"):
        for path, dummy, names in os.walk(os.path.join(ROOT, "inventories", "sim", folder)):
            for name in names:
                stat = os.stat(os.path.join(path, name))
                seen["controller:" + os.path.join(path, name)] = (stat.st_mtime, stat.st_size)
    return seen


def changed_between(before, after):
    return {k for k in set(before) | set(after) if before.get(k) != after.get(k)}


def written_by(argv):
    """Run ``argv`` (profiled); what it wrote is what changed during it and not in a window of the same length
    before it. Returns (seconds, tasks, out, written)."""
    first = snapshot()
    time.sleep(6)
    second = snapshot()
    seconds, tasks, out = profile_tasks(argv)
    third = snapshot()
    return seconds, tasks, out, sorted(changed_between(second, third) - changed_between(first, second))


def bench_orchestration():
    """serve.yml from scratch against the bare bring-up on the same images, in one run; a no-change serve.yml with
    its per-task profile; teardown.yml."""
    print("Orchestration on the 2-node simulated cluster (images and the model already on the nodes):")
    timed(["ansible-playbook", "playbooks/sim.yml"])
    timed(["ansible-playbook", "playbooks/serve.yml"])  # the model on every node, the plan of this cluster
    plan = sim_plan()
    bares, scratches = [], []
    for dummy in range(RUNS):  # each pair in one run: the bare bring-up, then serve.yml from the same state
        timed(["ansible-playbook", "playbooks/teardown.yml"])
        bares.append(bare_bringup(plan))
        if bares[-1] is None:
            sys.exit("bench: the bare bring-up gave no completion")
        scratches.append(timed(["ansible-playbook", "playbooks/serve.yml"])[0])
    bare, bare_runs = median_of(bares)
    scratch, scratch_runs = median_of(scratches)
    line("bare bring-up: docker run head + worker, vllm serve in the head, to a completion", "%.1f" % bare, "s", bare_runs)
    line("serve.yml from scratch to a verified endpoint", "%.1f" % scratch, "s", scratch_runs)
    line("serve.yml from scratch / bare bring-up", "%.2f" % statistics.median(s / b for s, b in zip(scratches, bares)), "x", "<= 1.15 x")
    again, tasks, changed, written = no_change(["ansible-playbook", "playbooks/serve.yml"])
    line("serve.yml again over SSH, nothing to change (changed=%d, %d written)" % (changed, len(written)), "%.1f" % again, "s",
         "<= 4 s, 0 changed, 0 written")
    # What this machine charges any playbook, measured in the same run: the seconds targets were set on a machine where it
    # was smaller, so a figure past them is read with it (docs/development.md#speed-targets).
    floor = ansible_floor()
    line("this machine's floor: a playbook of one ping per node (become), same SSH", "%.1f" % floor, "s")
    line("no-change run / that floor", "%.2f" % (again / floor), "x")
    for path in written:
        print("      written: " + path)
    print("    per-task profile of that run (ansible.posix.profile_tasks):")
    for task in tasks:
        print("      " + task.strip())
    seconds, dummy = timed(["ansible-playbook", "playbooks/teardown.yml"])
    line("teardown.yml", "%.1f" % seconds, "s", "<= 6 s")
    line("teardown.yml / the floor", "%.2f" % (seconds / floor), "x")
    # Like with like: both inventories as they are, each with its Prometheus on the head (inventories/sim and
    # inventories/sim-models both set vllm_monitoring: true), so the ratio is what a second deployment costs, with the
    # gateway it brings. The two deployments' figure with their monitoring off follows, without a target (the single
    # one is not measured again so).
    models = ["-i", os.path.join(ROOT, "inventories", "sim-models")]
    timed(["ansible-playbook", "playbooks/sim.yml"] + models)
    timed(["ansible-playbook", "playbooks/serve.yml"] + models)
    two, two_tasks, changed, dummy = no_change(["ansible-playbook", "playbooks/serve.yml"] + models)
    line("two deployments on the same two nodes (inventories/sim-models as it is), nothing to change (changed=%d)" % changed,
         "%.1f" % two, "s")
    line("two deployments' no-change run / the single one's", "%.2f" % (two / again), "x", "<= 1.5 x")
    print("    per-task profile of that run:")
    for task in two_tasks:
        print("      " + task.strip())
    off = ["-e", "vllm_monitoring=false"]
    timed(["ansible-playbook", "playbooks/serve.yml"] + models + off)
    unwatched, dummy, changed, dummy = no_change(["ansible-playbook", "playbooks/serve.yml"] + models + off)
    line("the same with monitoring off (its Prometheus removed; changed=%d)" % changed, "%.1f" % unwatched, "s")
    timed(["ansible-playbook", "playbooks/teardown.yml"] + models)
    timed(["ansible-playbook", "playbooks/sim.yml"])  # the nodes as inventories/sim knows them again (its SSH keys)


def engine_start_seconds():
    """vLLM's own figure for its last engine start, from the head's log: 'init engine (...) took N s'."""
    with open(os.path.join(SIM_ROOT, "nodes", "sim-head", "var", "dgx-spark", "container", "logs", "vllm.log"), encoding="utf-8") as handle:
        found = re.findall(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s", handle.read())
    return float(found[-1]) if found else None


def bench_compile():
    """A recreated container's start with the node's compile cache empty, then with it kept (module_utils/plan/
    compile_cache.py). The CPU build compiles sim_tiny with inductor once --enforce-eager is out; vLLM 0.32's CPU build
    cannot load its own AOT artifact back, so the classic path (VLLM_USE_AOT_COMPILE=0), whose inductor cache a warm
    start reads."""
    print("Compile cache on the 2-node simulated cluster (sim_tiny compiled; each start recreates the containers):")
    compiled = ["-e", json.dumps({"vllm_extra_flags": {"--enforce-eager": None}, "vllm_extra_env": {"VLLM_USE_AOT_COMPILE": "0"}})]
    timed(["ansible-playbook", "playbooks/sim.yml"])
    figures = {}
    for label in ("cold", "warm"):
        timed(["ansible-playbook", "playbooks/teardown.yml"])
        if label == "cold":
            for node in ("sim-head", "sim-worker1"):
                subprocess.run(["docker", "exec", node, "sh", "-c", "rm -rf /var/lib/dgx-spark-vllm/dgx-spark/container/cache/*"], check=True)
        seconds, dummy = timed(["ansible-playbook", "playbooks/serve.yml"] + compiled)
        figures[label] = (seconds, engine_start_seconds())
    for label, (seconds, engine) in figures.items():
        line("%s cache: serve.yml to a verified endpoint; vLLM's engine start %s s" % (label, engine), "%.1f" % seconds, "s")
    if figures["cold"][1] and figures["warm"][1]:
        line("warm engine start / cold", "%.2f" % (figures["warm"][1] / figures["cold"][1]), "x")
    timed(["ansible-playbook", "playbooks/teardown.yml"])


def ansible_floor():
    """The median of RUNS runs of the least a playbook on the cluster does: one ping per node, as root, over the same
    SSH (its connections already open): Ansible's start, the inventory, one module round trip per node."""
    folder = tempfile.mkdtemp(prefix="bench-floor.")
    path = os.path.join(folder, "floor.yml")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("- hosts: spark_cluster\n  gather_facts: false\n  tasks:\n    - ansible.builtin.ping:\n      become: true\n")
    timed(["ansible-playbook", path])  # its module built once, as the no-change runs' were
    return median_of([timed(["ansible-playbook", path])[0] for dummy in range(max(RUNS, 3))])[0]


def no_change(argv):
    """The median of RUNS no-change runs of ``argv``: (seconds, the last run's task profile, changed, written)."""
    agains, changed, written = [], 0, []
    for dummy in range(RUNS):
        seconds, tasks, out, wrote = written_by(argv)
        agains.append(seconds)
        changed += sum(h["changed"] for h in recap_of(out).values())
        written += wrote
    return median_of(agains)[0], tasks, changed, sorted(set(written))


def recap_of(out):
    hosts = {}
    for match in re.finditer(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", out, re.M):
        hosts[match.group(1)] = {"changed": int(match.group(3)), "failed": int(match.group(5))}
    return hosts


def bench_plan8():
    """Probe and plan for 8 simulated nodes (a network and a root of their own, beside the default cluster)."""
    import yaml

    print("Probe and plan for 8 simulated nodes:")
    folder = tempfile.mkdtemp(prefix="bench-sim8.")
    names = ["sim8-head"] + ["sim8-w%d" % i for i in range(1, 8)]
    hosts = {n: {"ansible_host": "10.214.0.%d" % (10 + i), "spark_fabric_ip": "10.212.0.%d" % (10 + i), "sim_gid_index": 3 if i == 0 else 5}
             for i, n in enumerate(names)}
    with open(os.path.join(ROOT, "inventories", "sim", "group_vars", "all", "sim.yml"), encoding="utf-8") as handle:
        group_vars = yaml.safe_load(handle)
    group_vars.update(sim_cluster_root="/var/lib/dgx-spark-sim8", sim_cluster_network="dgx-spark-sim8",
                      sim_cluster_subnet="10.212.0.0/24", sim_cluster_mgmt_subnet="10.214.0.0/24", sim_cluster_endpoint_port=8008,
                      vllm_profile_file=os.path.join(folder, "dp8.yml"), vllm_hf_endpoint="http://10.214.0.5:8090")
    inventory = {"spark_cluster": {"vars": {"ansible_user": "nvidia", "ansible_ssh_private_key_file": "{{ inventory_dir }}/.secrets/sim_ssh_ed25519"},
                                   "children": {"spark_head": {"hosts": {names[0]: hosts[names[0]]}},
                                                "spark_workers": {"hosts": {n: hosts[n] for n in names[1:]}}}},
                 "all": {"vars": group_vars}}
    with open(os.path.join(ROOT, "profiles", "sim_tiny.yml"), encoding="utf-8") as handle:
        profile = yaml.safe_load(handle)
    profile.update(name="sim_tiny_dp8")
    profile["parallel"].update(nodes=8, tensor=1, data=8)
    with open(os.path.join(folder, "dp8.yml"), "w", encoding="utf-8") as handle:
        yaml.safe_dump(profile, handle)
    with open(os.path.join(folder, "hosts.yml"), "w", encoding="utf-8") as handle:
        yaml.safe_dump(inventory, handle)
    timed(["ansible-playbook", "-i", os.path.join(folder, "hosts.yml"), "playbooks/sim.yml"])
    try:
        timed(["ansible-playbook", "-i", os.path.join(folder, "hosts.yml"), "playbooks/plan.yml"])  # the image's flags, read once
        seconds, tasks, dummy = profile_tasks(["ansible-playbook", "-i", os.path.join(folder, "hosts.yml"), "playbooks/plan.yml"])
        line("plan.yml on 8 nodes: probe every node and plan", "%.1f" % seconds, "s", "<= 15 s")
        for task in tasks[:5]:
            print("      " + task.strip())
    finally:
        timed(["ansible-playbook", "-i", os.path.join(folder, "hosts.yml"), "playbooks/sim.yml", "-e", "sim_state=absent"])


BENCH_REPO = "dgx-spark-sim/bench-4g"
STREAM = r"""
import socket, subprocess, sys, time
role, address, folder = sys.argv[1], (sys.argv[2], 9999), sys.argv[3]
if role == "send":
    server = socket.create_server(address)
    conn, dummy = server.accept()
    tar = subprocess.Popen(["tar", "-C", folder, "-cf", "-", "."], stdout=subprocess.PIPE)
    for block in iter(lambda: tar.stdout.read(1 << 20), b""):
        conn.sendall(block)
    conn.close()
    sys.exit(tar.wait())
started = time.monotonic()
for attempt in range(50):
    try:
        conn = socket.create_connection(address)
        break
    except OSError:
        time.sleep(0.1)
tar = subprocess.Popen(["tar", "-C", folder, "-xf", "-"], stdin=subprocess.PIPE)
moved = 0
for block in iter(lambda: conn.recv(1 << 20), b""):
    tar.stdin.write(block)
    moved += len(block)
tar.stdin.close()
tar.wait()
print(moved, time.monotonic() - started)
"""


def make_bench_model(folder, shards=2, shard_bytes=2 << 30):
    os.makedirs(folder, exist_ok=True)
    weight_map = {}
    for number in range(1, shards + 1):
        name = "model-%05d-of-%05d.safetensors" % (number, shards)
        with open(os.path.join(folder, name), "wb") as handle:
            for dummy in range(shard_bytes >> 24):
                handle.write(os.urandom(1 << 24))
        weight_map["layer.%d.weight" % number] = name
    for name, data in (("model.safetensors.index.json", {"metadata": {"total_size": shards * shard_bytes}, "weight_map": weight_map}),
                       ("config.json", {"architectures": ["LlamaForCausalLM"]}), ("tokenizer.json", {}),
                       ("tokenizer_config.json", {})):
        with open(os.path.join(folder, name), "w", encoding="utf-8") as handle:
            json.dump(data, handle)


def bench_model():
    print("Model weights on the 2-node simulated cluster (%s: 2 shards of 2 GiB, as large as real ones):" % BENCH_REPO)
    import shutil
    timed(["ansible-playbook", "playbooks/sim.yml"])
    hub = os.path.join(SIM_ROOT, "hub", BENCH_REPO)
    cache = "huggingface/hub/models--" + BENCH_REPO.replace("/", "--")
    nodes = {n: os.path.join(SIM_ROOT, "nodes", n, "var", "models") for n in ("sim-head", "sim-worker1")}
    with open(os.path.join(ROOT, "profiles", "sim_tiny.yml"), encoding="utf-8") as handle:
        profile = handle.read().replace("id: dgx-spark-sim/sim-tiny", "id: " + BENCH_REPO)
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as handle:
        handle.write(profile)
    model_yml = ["ansible-playbook", "playbooks/model.yml", "-e", "vllm_profile=", "-e", "vllm_profile_file=" + handle.name]
    try:
        shutil.rmtree(hub, ignore_errors=True)
        make_bench_model(hub)
        for folder in nodes.values():
            shutil.rmtree(os.path.join(folder, cache), ignore_errors=True)
        seconds, out = timed(model_yml)
        line("model.yml: fetch on the head and copy to the worker", "%.1f" % seconds, "s")
        # Alternate the two ways three times on a quiet disk (2 cores and the page cache make single runs noisy).
        rsync_rates, stream_rates, runs = [], [], []
        source = os.path.join(nodes["sim-head"], cache, "blobs")
        target = "/tmp/dgx-spark-bench-stream"
        for dummy in range(3):
            shutil.rmtree(os.path.join(nodes["sim-worker1"], cache))
            os.sync()
            seconds, out = timed(model_yml)
            runs.append(seconds)
            found = re.search(r"sim-worker1 <- sim-head: (\d+) bytes .*? in ([0-9.]+) s", " ".join(out.split()))
            rsync_rates.append(int(found.group(1)) / float(found.group(2)) / 1e6)
            # The same bytes as one raw tar stream over a TCP socket between the same two nodes.
            subprocess.run(["docker", "exec", "sim-worker1", "sh", "-c", "rm -rf %s && mkdir -p %s" % (target, target)], check=True)
            os.sync()
            sender = subprocess.Popen(["docker", "exec", "sim-head", "python3", "-c", STREAM, "send", "10.210.0.10", source])
            received = subprocess.run(["docker", "exec", "sim-worker1", "python3", "-c", STREAM, "receive", "10.210.0.10",
                                       target], capture_output=True, text=True, check=True).stdout.split()
            sender.wait()
            subprocess.run(["docker", "exec", "sim-worker1", "rm", "-rf", target], check=True)
            stream_rates.append(int(received[0]) / float(received[1]) / 1e6)
        rate, stream_rate = statistics.median(rsync_rates), statistics.median(stream_rates)
        line("model.yml: copy head -> worker only (whole run, median of 3)", "%.1f" % statistics.median(runs), "s")
        line("rsync copy head -> worker, median of %s" % ", ".join("%.0f" % r for r in rsync_rates), "%.0f" % rate, "MB/s")
        line("raw tar stream over TCP, median of %s" % ", ".join("%.0f" % r for r in stream_rates), "%.0f" % stream_rate, "MB/s")
        line("rsync / raw stream", "%.2f" % (rate / stream_rate), "x", ">= 0.9x")
        seconds, out = timed(model_yml)
        line("model.yml again, nothing to change", "%.1f" % seconds, "s")
    finally:
        shutil.rmtree(hub, ignore_errors=True)
        for folder in nodes.values():
            shutil.rmtree(os.path.join(folder, cache), ignore_errors=True)
        os.unlink(handle.name)


def image_bytes(node, image):
    out = subprocess.run(["docker", "-H", node_socket(node), "image", "inspect", "--format", "{{.Size}}", image],
                         capture_output=True, text=True, check=True).stdout
    return int(out.strip())


def bench_distribution():
    """The runtime image head -> worker: the image role (serve.yml with the image missing on the worker; its task's own
    time from profile_tasks) against the same stream typed by hand over the same SSH, from the head."""
    print("Image distribution head -> worker over the nodes' SSH:")
    timed(["ansible-playbook", "playbooks/sim.yml"])
    timed(["ansible-playbook", "playbooks/serve.yml"])
    plan = sim_plan()
    head, worker = plan["nodes_order"][0], plan["nodes_order"][1]
    image, fabric = plan["cluster"]["image"], plan["nodes"][worker]["fabric_ip"]
    size = image_bytes(head, image)
    key = os.path.join(ROOT, "inventories", "sim", ".secrets", "sim_ssh_ed25519")
    address = json.loads(subprocess.run(["ansible-inventory", "-i", os.path.join(ROOT, "inventories", "sim"), "--host", head],
                                        env=ENV, capture_output=True, text=True, check=True).stdout)["ansible_host"]
    ssh_head = ["ssh", "-i", key, "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
                "nvidia@" + address]
    roles, raws = [], []
    for dummy in range(RUNS):
        timed(["ansible-playbook", "playbooks/teardown.yml"])
        subprocess.run(["docker", "-H", node_socket(worker), "image", "rm", "-f", image], capture_output=True, check=False)
        started = time.monotonic()
        subprocess.run(ssh_head + ["bash -c 'set -o pipefail; docker save %s | ssh -o BatchMode=yes %s docker load'" % (image, fabric)],
                       check=True, capture_output=True)
        raws.append(time.monotonic() - started)
        subprocess.run(["docker", "-H", node_socket(worker), "image", "rm", "-f", image], capture_output=True, check=False)
        dummy, tasks, out = profile_tasks(["ansible-playbook", "playbooks/serve.yml"], top=40)
        streamed = [float(re.search(r"(\d+\.\d+)s$", t).group(1)) for t in tasks if "Stream the image from the head" in t]
        if not streamed:
            sys.exit("bench: serve.yml did not stream the image to %s" % worker)
        roles.append(streamed[0])
    raw, raw_runs = median_of(raws)
    role, role_runs = median_of(roles)
    line("raw docker save | ssh | docker load, %.2f GB" % (size / 1e9), "%.0f" % (size / 1e6 / raw), "MB/s", raw_runs)
    line("image role, the same image and nodes", "%.0f" % (size / 1e6 / role), "MB/s", role_runs)
    line("image role / raw stream", "%.2f" % (raw / role), "x", ">= 0.9 x")


def main(argv):
    global RUNS  # pylint: disable=global-statement
    if "--runs" in argv:
        RUNS = int(argv[argv.index("--runs") + 1])
        argv = argv[:argv.index("--runs")] + argv[argv.index("--runs") + 2:]
    everything = ["probes", "planner", "sim", "orchestration", "compile", "plan8", "model", "distribution"]
    wanted = [a for a in argv if not a.startswith("--")] or everything
    if "sim" in wanted:
        bench_sim("--cold" in argv)
    if "probes" in wanted:
        timed(["ansible-playbook", "playbooks/sim.yml"])
        timed(["ansible-playbook", "playbooks/serve.yml"])
        bench_probes()
    if "planner" in wanted:
        bench_planner()
    if "orchestration" in wanted:
        bench_orchestration()
    if "compile" in wanted:
        bench_compile()
    if "plan8" in wanted:
        bench_plan8()
    if "model" in wanted:
        bench_model()
    if "distribution" in wanted:
        bench_distribution()


if __name__ == "__main__":
    main(sys.argv[1:])
