# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmarks that print figures (make bench). Targets are printed beside the figures; nothing asserts.

  probes        each probe module's run time (module process only, on this machine), target < 1 s
  planner       planning an 8-node cluster, target < 1 s
  sim           warm sim.yml with the images present (target <= 60 s), disk used; --cold also rebuilds
  orchestration serve.yml from scratch minus vLLM's own start-up (target <= 30 s), a no-change re-run
                (target <= 20 s), teardown.yml
  model         a 4 GiB model (2 shards) through the model role: fetch on the head from the simulated hub, copy
                head -> worker against a raw tar stream between the same nodes (target >= 0.9x), a no-change run

Usage: scripts/bench.py [probes] [planner] [sim] [orchestration] [model] [--cold]
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".collections"))
sys.path.insert(0, os.path.join(ROOT, "tests", "unit"))
ENV = dict(os.environ, PATH=os.path.join(ROOT, ".venv", "bin") + os.pathsep + os.environ["PATH"],
           ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), PYTHONPATH=os.path.join(ROOT, ".collections"))
SIM_ROOT = "/var/lib/dgx-spark-sim"


def line(name, value, unit, target=None):
    print("  %-58s %10s %-4s %s" % (name, value, unit, ("target " + target) if target else ""))


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


def run_module(name, args, runs=5):
    """Run a module as Ansible does on a node (its own Python process, arguments as JSON), ``runs`` times."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, handle)
    path = os.path.join(ROOT, "plugins", "modules", name + ".py")
    times = []
    for dummy in range(runs):
        started = time.monotonic()
        proc = subprocess.run([sys.executable, path, handle.name], env=ENV, capture_output=True, text=True, check=False)
        times.append(time.monotonic() - started)
        if '"failed": true' in proc.stdout:
            return None, proc.stdout[-300:]
    os.unlink(handle.name)
    return times, None


def bench_probes():
    print("Probes (each module as its own process, %s):" % sys.executable)
    sysfs = os.path.join(SIM_ROOT, "nodes", "sim-head", "sys")
    smi = os.path.join(SIM_ROOT, "nodes", "sim-head", "bin", "nvidia-smi")
    cases = [("unified_memory_info", {"nvidia_smi": smi if os.path.exists(smi) else "nvidia-smi", "gpu_memory_utilization": 0.8}),
             ("roce_gid_info", {"sysfs_root": sysfs if os.path.exists(sysfs) else "/sys"}),
             ("ray_cluster_info", {"container": "dgx-spark-ray-sim-head", "expected_nodes": 2}),
             ("vllm_image_info", {"image": "dgx-spark-sim/runtime:sim", "cache_dir": os.path.join(tempfile.gettempdir(), "bench-image-info")})]
    for name, args in cases:
        times, error = run_module(name, args)
        if times is None:
            line(name, "n/a", "", "(%s)" % error.strip().splitlines()[-1][:80])
            continue
        line("%s median of %d (min %.2f s)" % (name, len(times), min(times)), "%.2f" % statistics.median(times), "s",
             "< 1 s" + (" (first run reads the image: %.1f s)" % times[0] if name == "vllm_image_info" else ""))


def bench_planner():
    from ansible_collections.dgx_spark.vllm.plugins.module_utils import planner, profiles
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
    seconds, dummy = timed(["ansible-playbook", "playbooks/sim.yml"])
    line("warm sim.yml, images present", "%.1f" % seconds, "s", "<= 60 s")
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


def bench_orchestration():
    print("Orchestration on the 2-node simulated cluster:")
    timed(["ansible-playbook", "playbooks/sim.yml"])
    timed(["ansible-playbook", "playbooks/teardown.yml"])
    log_path = os.path.join(SIM_ROOT, "nodes", "sim-head", "state", "dgx-spark", "logs", "vllm.log")
    if os.path.exists(log_path):
        os.truncate(log_path, 0)
    seconds, dummy = timed(["ansible-playbook", "playbooks/serve.yml"])
    with open(os.path.join(os.path.dirname(os.path.dirname(log_path)), "run", "vllm.json"), encoding="utf-8") as handle:
        started_at = json.load(handle)["started_at"]
    with open(log_path, encoding="utf-8", errors="replace") as handle:
        startup = vllm_startup_seconds(handle.read(), started_at)
    with open(os.path.join(ROOT, "inventories", "sim", ".artifacts", "summary.json"), encoding="utf-8") as handle:
        summary = json.load(handle)
    first, smoke = float(summary["first_token_seconds"]), float(summary["smoke_test_seconds"])
    line("serve.yml from scratch to a verified endpoint", "%.1f" % seconds, "s")
    if startup is not None:
        line("vLLM's own start-up (process start to its log's startup complete)", "%.1f" % startup, "s")
        line("vLLM's first streamed token (CPU warm-up of the first request)", "%.1f" % first, "s")
        line("the profile's smoke tests", "%.1f" % smoke, "s")
        line("overhead: serve.yml minus vLLM start-up", "%.1f" % (seconds - startup), "s", "<= 30 s")
        line("overhead: also minus first token and smoke tests", "%.1f" % (seconds - startup - first - smoke), "s", "<= 30 s")
    seconds, dummy = timed(["ansible-playbook", "playbooks/serve.yml"])
    line("serve.yml again, nothing to change", "%.1f" % seconds, "s", "<= 20 s")
    seconds, dummy = timed(["ansible-playbook", "playbooks/teardown.yml"])
    line("teardown.yml", "%.1f" % seconds, "s")


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
    nodes = {n: os.path.join(SIM_ROOT, "nodes", n, "models") for n in ("sim-head", "sim-worker1")}
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


def main(argv):
    wanted = [a for a in argv if not a.startswith("--")] or ["probes", "planner", "sim", "orchestration", "model"]
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
    if "model" in wanted:
        bench_model()


if __name__ == "__main__":
    main(sys.argv[1:])
