"""Shared helpers of the unit tests: fixture paths and trees rebuilt from captures."""

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # the checkout
FIXTURES = os.path.join(HERE, "fixtures")
GOLDEN = os.path.join(HERE, "golden")
MODEL_REPO = "dgx-spark-sim/sim-tiny"  # the captured fetch's (fixtures/model)


def fixture(*parts):
    return os.path.join(FIXTURES, *parts)


def read_fixture(*parts):
    with open(fixture(*parts), encoding="utf-8") as handle:
        return handle.read()


def build_sysfs(capture_name, root):
    """Rebuild a sysfs tree under ``root`` from a ``grep -r .`` capture.

    ``path:value`` lines become files; ``grep: path: Invalid argument`` lines (attributes the kernel
    refuses to read, such as the type of an empty GID slot) become directories, so reading them raises
    an OSError exactly where the kernel raised EINVAL.
    """
    for line in read_fixture("sysfs", capture_name).splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith("grep: "):
            path = line[len("grep: "):].rsplit(": ", 1)[0]
            os.makedirs(os.path.join(root, path), exist_ok=True)
            continue
        path, dummy, value = line.partition(":")
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as handle:
            handle.write(value + "\n")
    return str(root)


def build_proc(root, meminfo_name, processes=()):
    """A proc tree: ``meminfo`` from a capture and one ``<pid>/status`` per (pid, name, ppid, rss_kib)."""
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "meminfo"), "w", encoding="utf-8") as handle:
        handle.write(read_fixture("meminfo", meminfo_name))
    for pid, name, ppid, rss_kib in processes:
        os.makedirs(os.path.join(root, str(pid)), exist_ok=True)
        with open(os.path.join(root, str(pid), "status"), "w", encoding="utf-8") as handle:
            handle.write("Name:\t%s\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t%d\nPid:\t%d\nPPid:\t%d\n"
                         "VmRSS:\t%8d kB\nRssAnon:\t%8d kB\nRssFile:\t%8d kB\nRssShmem:\t       0 kB\n"
                         % (name, pid, pid, ppid, rss_kib, rss_kib * 3 // 4, rss_kib // 4))
    return str(root)


def roce_facts(capture, root):
    """The roce_gid_info result for a sysfs capture."""
    from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import roce

    ports, dummy = roce.read_devices(build_sysfs(capture, root))
    hca, index, dummy = roce.nccl_choice(ports)
    return {"roce_devices": ports, "nccl_ib_hca": hca, "nccl_gid_index": index}


def memory_facts(meminfo_name):
    """The unified_memory_info result for a GB10 meminfo capture."""
    from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import unified_memory as um

    return um.summarize(um.parse_meminfo(read_fixture("meminfo", meminfo_name)),
                        um.parse_gpu_query(read_fixture("nvidia_smi", "gb10-query-gpu.csv")), [])


def image_facts():
    import json

    return json.loads(read_fixture("image_info", "vllm-cpu-0.32.0.json"))


SPARKS = [  # name, fabric IP, sysfs capture, management address (ansible_host resolves to it)
    ("spark1", "192.168.100.10", "spark-one-cable.txt", "192.168.1.101"),
    ("spark2", "192.168.100.11", "spark-ipv6-shift.txt", "192.168.1.102"),
    ("spark3", "192.168.100.12", "spark-mixed-index.txt", "192.168.1.103"),
]


def stand_in_sha256(path):
    """A sha256 for a file the tests pin without having it (planning reads the pin, never the file)."""
    import hashlib

    return hashlib.sha256(("stand-in for " + path).encode()).hexdigest()


def spark_inputs(profile, root, count=2, backend=None, meminfo="gb10-idle.txt", settings=None):
    """Planner inputs for ``count`` Sparks of the sample inventory with probe facts from captures."""
    import os

    nodes = {}
    for name, ip, capture, management in SPARKS[:count]:
        nodes[name] = {"fabric_ip": ip, "fabric_interfaces": ["enp1s0f1np1"], "ansible_host": name + ".lan",
                       "addresses": sorted(["127.0.0.1", management, ip]), "resolved": [management],
                       "memory": memory_facts(meminfo), "roce": roce_facts(capture, os.path.join(str(root), name)),
                       "image": image_facts()}
    # The seed profiles trust the model's code; the tests accept an unpinned revision, as the sample inventory says how.
    base = {"image": "nvcr.io/nvidia/vllm:26.09-py3", "api_key_file": "inventories/sparks/.secrets/vllm_api_key",
            "trust_remote_code_unpinned": True}
    # A plugin file a profile loads runs only pinned (vllm_code_pins): a stand-in sha256 for each, as a user's would be.
    flags = (profile.get("vllm") or {}).get("flags") or {}
    files = [str(flags[f]) for f in ("--reasoning-parser-plugin", "--tool-parser-plugin") if str(flags.get(f) or "").startswith("/")]
    if files:
        base["code_pins"] = {path: stand_in_sha256(path) for path in files}
    base.update(settings or {})
    return {
        "head_hosts": [SPARKS[0][0]],
        "order": [s[0] for s in SPARKS[:count]],
        "nodes": nodes,
        "profile": profile,
        "backend": backend or profile.get("backend", "ray"),
        "settings": base,
        "image_info": image_facts(),
    }


def run_module(name, args):
    """Run a module of the checkout as Ansible runs it on a node (its own process, arguments as JSON); its answer."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, handle)
    try:
        proc = subprocess.run([sys.executable, os.path.join(root, "plugins", "modules", name + ".py"), handle.name],
                              env=dict(os.environ, PYTHONPATH=os.path.join(root, ".collections")),
                              capture_output=True, text=True, check=False, timeout=120)
    finally:
        os.unlink(handle.name)
    return json.loads(proc.stdout)


def run_action(name, args):
    """Run an action plugin of the checkout on the controller (ansible localhost -m), with the json callback."""
    import json
    import os
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(root, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_INVENTORY_UNPARSED_WARNING="0", ANSIBLE_LOCALHOST_WARNING="0")
    proc = subprocess.run([os.path.join(root, ".venv", "bin", "ansible"), "localhost", "-c", "local", "-i", "localhost,",
                           "-m", "dgx_spark.vllm." + name, "-a", json.dumps(args)],
                          cwd=root, env=env, capture_output=True, text=True, check=False, timeout=120)
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


# A switchless ring's cable between two Sparks' ConnectX ports (spark_fabric_ring's links), for the ring's tests.
P0, P1 = "enp1s0f0np0", "enp1s0f1np1"


def cable(a, b, subnet=None):
    link = {"a": a, "a_if": P0, "b": b, "b_if": P1}
    if subnet:
        link["subnet"] = subnet
    return link


def make_cache(models_dir, manifest, skip=(), sizes=None, record=False):
    """The layout snapshot_download leaves for the captured fetch (fixtures/model: the simulated hub's sim-tiny):
    blobs/<etag>, snapshots/<commit>/<file> -> ../../blobs/<etag>, refs/main; with ``record``, the manifest the
    fetch keeps beside it (what the head holds)."""
    from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import model_files as mf
    with open(fixture("model", "model.safetensors.index.json"), encoding="utf-8") as handle:
        index = json.load(handle)
    root = os.path.join(models_dir, "huggingface", "hub", mf.repo_folder(MODEL_REPO))
    snapshot = os.path.join(root, "snapshots", manifest["commit"])
    os.makedirs(os.path.join(root, "blobs"))
    os.makedirs(os.path.join(root, "refs"))
    with open(os.path.join(root, "refs", "main"), "w", encoding="utf-8") as handle:
        handle.write(manifest["commit"])
    for path, meta in manifest["files"].items():
        if path in skip:
            continue
        blob = os.path.join(root, "blobs", meta["sha256"] or ("oid-" + path.replace("/", "-")))
        with open(blob, "wb") as handle:
            if path == mf.INDEX:
                handle.write(json.dumps(index).encode().ljust(meta["size"]))
            else:
                handle.truncate((sizes or {}).get(path, meta["size"]))
        link = os.path.join(snapshot, path)
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(os.path.relpath(blob, os.path.dirname(link)), link)
    if record:
        kept = os.path.join(models_dir, mf.MANIFESTS, mf.manifest_key(MODEL_REPO, manifest["commit"]) + ".json")
        os.makedirs(os.path.dirname(kept), exist_ok=True)
        with open(kept, "w", encoding="utf-8") as handle:
            json.dump(manifest, handle)
    return root, snapshot
