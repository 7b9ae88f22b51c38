# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The planner's inventory checks: groups, node order, fabric IPs, backend, parallel sizes. No probe facts needed."""

from __future__ import annotations

import ipaddress
import posixpath
import re

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import flags as flag_utils, nccl_library, pulls, ring as ring_links
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.base import node_paths

# A cluster name becomes part of container names, folders and the firewall table's name (docs/security.md).
CLUSTER_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?$")
# A Hugging Face repository id (org/name); the hub's own rule, without "..", which would leave the models folder.
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")


def node_order(groups, head_group="spark_head", worker_group="spark_workers"):
    """The head first (rank 0), then the workers in inventory order; returns (heads, order)."""
    heads = list(groups.get(head_group) or [])
    workers = [h for h in (groups.get(worker_group) or []) if h not in heads]
    return heads, heads[:1] + workers + heads[1:]


def check_groups(groups, findings, cluster_group="spark_cluster"):
    """spark_head and spark_workers must be children of spark_cluster: the node plays run on it."""
    if groups is None:
        return
    cluster = set(groups.get(cluster_group) or [])
    outside = [h for g in ("spark_head", "spark_workers") for h in (groups.get(g) or []) if h not in cluster]
    if outside:
        findings.error("all", outside, "%s in spark_head or spark_workers but not in %s; make both groups children of %s "
                       "(inventories/sparks/hosts.yml shows how)" % (", ".join(outside), cluster_group, cluster_group))
    placed = set(groups.get("spark_head") or []) | set(groups.get("spark_workers") or [])
    for host in sorted(cluster - placed):  # the node plays would run on it, but no rank is planned for it
        findings.error(host, host, "%s is in %s but in neither spark_head nor spark_workers, so no rank is planned for it; put "
                       "it in spark_workers, or take it out of %s" % (host, cluster_group, cluster_group))


def check_head(heads, findings):
    """Exactly one head: it serves the endpoint and holds rank 0."""
    heads = heads or []
    if len(heads) != 1:
        findings.error("spark_head", heads, "the inventory needs exactly one host in spark_head, found %d (%s); "
                       "put the node that serves the endpoint there" % (len(heads), ", ".join(heads) or "none"))


def check_inventory(inputs, findings):
    """Groups, fabric IPs, backend: what can be checked before any probe."""
    check_head(inputs.get("head_hosts"), findings)
    check_groups(inputs.get("groups"), findings)
    seen = {}
    for name in inputs.get("order", []):
        node = inputs["nodes"].get(name, {})
        ip = node.get("fabric_ip")
        if not ip:
            findings.error(name, None, "%s has no spark_fabric_ip; set it to the node's address on the ConnectX link" % name)
            continue
        try:
            address = ipaddress.ip_address(str(ip))
        except ValueError:
            findings.error(name, ip, "%s: spark_fabric_ip %r is not an IP address" % (name, ip))
            continue
        if address.version != 4:
            findings.error(name, ip, "%s: spark_fabric_ip %s must be IPv4 (RoCE v2 GIDs, Ray and NCCL bootstrap use IPv4)" % (name, ip))
        if str(address) in seen:
            findings.error(name, ip, "%s and %s have the same spark_fabric_ip %s; each node needs its own" % (seen[str(address)], name, ip))
        seen[str(address)] = name
    backend = inputs.get("backend")
    if backend not in ("ray", "mp"):
        findings.error("all", backend, "vllm_backend must be ray or mp, got %r" % (backend,))
    settings = inputs["settings"]
    if settings["nccl_library"] not in nccl_library.MODES:
        findings.error("all", settings["nccl_library"], "vllm_nccl_library must be image (the image's own NCCL) or system (each "
                       "node's libnccl2 mounted over it), got %r" % settings["nccl_library"])
    if settings["nccl_transport"] not in ("auto", "roce", "socket"):
        findings.error("all", settings["nccl_transport"], "vllm_nccl_transport must be auto, roce or socket, got %r" % settings["nccl_transport"])
    for key, value in (inputs.get("extra_env") or {}).items():
        if key == "RAY_ADDRESS" and str(value).strip().lower().startswith("ray://"):
            findings.error("all", value, "RAY_ADDRESS=%s is a Ray Client address: vLLM would run as a remote client and silently "
                           "serve on one GPU. The collection runs vllm serve inside the head's container; remove it" % value)
    pulls.check(settings, findings)
    check_secrets(inputs, findings)
    check_flags(inputs, findings)
    check_volumes(inputs, findings)
    name = settings["cluster_name"]
    if not CLUSTER_NAME.match(str(name)):
        findings.error("all", name, "vllm_cluster_name %r is not a valid cluster name: it names containers, folders and the firewall "
                       "table, so use 1-40 lower-case letters, digits and '-', starting and ending with a letter or digit "
                       "(for example dgx-spark)" % (name,))
    if settings["images_kept"] < 1:
        findings.error("all", settings["images_kept"], "vllm_images_kept %d keeps no image; set it to 1 or more (1: only the serving "
                       "image, 2: also the one before it, which an upgrade rolls back to)" % settings["images_kept"])
    ports = {"vllm_port": settings["port"], "ray_port": settings["ray_port"], "master_port": settings["master_port"]}
    for key, value in ports.items():
        if not 0 < value < 65536:
            findings.error("all", value, "%s %d is not a TCP port (1-65535)" % (key, value))
    if len(set(ports.values())) < len(ports):
        findings.error("all", ports, "vllm_port, the Ray port and the master port must differ, got %s" % ports)


# Host paths no container may mount, with what reaches the host's root through them. The state folder: root runs the
# supervisor's code and loads the firewall's ruleset from it (containers get only its container/ folders). Docker's
# socket: whoever talks to it is root.
SOCKET = "the container runtime's socket (whoever talks to it is root on the node)"
HOST_ONLY = {"/var/run/docker.sock": SOCKET, "/run/docker.sock": SOCKET, "/run/containerd/containerd.sock": SOCKET,
             "/var/lib/docker": "Docker's own data (every container's files)"}


def host_path(text):
    """A host path as the kernel reads it: repeated slashes are one (normpath keeps two leading ones)."""
    return posixpath.normpath(re.sub("/+", "/", str(text)))


def overlaps(one, other):
    return one == other or one.startswith(other.rstrip("/") + "/") or other.startswith(one.rstrip("/") + "/")


def check_volumes(inputs, findings):
    """A profile's container.extra_volumes must not reach the state folder, a folder holding it, Docker's socket or
    data; the models folder (which the fetch mounts read-write, every container read-only) must not overlap the state
    folder."""
    settings = inputs["settings"]
    only = dict(HOST_ONLY)
    for node in inputs.get("order") or [None]:
        state = host_path(str(settings.get("state_dir") or "").replace("{node}", node or ""))  # every cluster's, this one's in it
        paths = node_paths(settings, node or "", None)
        models, cluster_state = host_path(paths["models_dir"]), host_path(paths["state_dir"])
        if state.startswith("/"):
            only[state] = "the state folder (root runs the supervisor's code and loads the firewall from it)"
            if models.startswith("/") and overlaps(models, cluster_state):
                findings.error(node or "all", models, "%s: the models folder %s overlaps the state folder %s, which no container may "
                               "mount; set spark_models_dir and spark_state_dir apart" % (node, models, cluster_state))
    for volume in (inputs["profile"].get("container") or {}).get("extra_volumes") or []:
        source = host_path(str(volume).split(":", 1)[0])
        if not source.startswith("/"):
            continue  # a named volume of Docker's
        for path, what in sorted(only.items()):
            if overlaps(path, source):
                findings.error("all", volume, "profile %s: container.extra_volumes mounts %s, which reaches %s at %s: the model's "
                               "code runs as root in the container. Mount another folder" % (inputs["profile"].get("name"), source, what, path))
                break


def flag_sources(inputs):
    """Where vLLM's flags come from, as findings name each: (name, the mapping holding them, its key): the profile's
    vllm.flags and vllm_extra_flags."""
    profile = inputs["profile"]
    vllm = profile.get("vllm") if isinstance(profile.get("vllm"), dict) else {}
    return (("profile %s: vllm.flags" % profile.get("name"), vllm, "flags"), ("vllm_extra_flags", inputs, "extra_flags"))


def canonical_flags(inputs, findings):
    """The profile's flags and vllm_extra_flags spelt as vLLM's parser reads them (flags.canonical), in ``inputs``
    itself: every check after this one, and the argv, see one spelling."""
    for where, holder, key in flag_sources(inputs):
        if holder.get(key):
            holder[key], problems = flag_utils.canonical(holder[key])
            for message in problems:
                findings.error("all", None, "%s: %s" % (where, message))


def check_flags(inputs, findings, merged=None, planned=None):
    """No flag may abbreviate an option, or set what the plan sets (flags.refused): either would pass every check unseen
    and reach vLLM. Before the probes, each source of flags on its own; with the plan's values (``planned``), the flags
    the argv carries (``merged``) against them."""
    sources = ([("vLLM's flags (the profile's vllm.flags and vllm_extra_flags)", merged)] if planned is not None else
               [(where, holder.get(key)) for where, holder, key in flag_sources(inputs)])
    for where, given in sources:
        for flag, why in flag_utils.refused(given or {}, planned):
            findings.error("all", flag, "%s, %s: %s; nothing was changed" % (where, flag, why))


def check_model(inputs, findings):
    """The model's id stays inside the models folder, and the repository's code runs only at a pinned commit."""
    profile = inputs["profile"]
    model_id = str(profile["model"]["id"])
    if model_id.startswith("/"):
        if posixpath.normpath(model_id) != model_id or not model_id.startswith("/models/") or ".." in model_id.split("/"):
            findings.error("all", model_id, "profile %s: model.id %s must be a normalized path under /models (no '..', no '//'); "
                           "put the model's folder under the nodes' models folder and name it /models/<folder>" % (profile["name"], model_id))
    elif not REPO_ID.match(model_id) or ".." in model_id:
        findings.error("all", model_id, "profile %s: model.id %r is neither a Hugging Face repository (org/name: letters, digits, "
                       "'.', '_', '-', no '..') nor a path under /models; fix the id" % (profile["name"], model_id))
    flags = dict((profile.get("vllm") or {}).get("flags") or {}, **(inputs.get("extra_flags") or {}))
    if not flag_utils.given(flags.get("--trust-remote-code")) or model_id.startswith("/"):
        return
    code_revision = flags.get("--code-revision")
    if flag_utils.given(code_revision) and not COMMIT.match(str(code_revision)):
        findings.error("all", code_revision, "profile %s sets --trust-remote-code, and --code-revision %s, which fetches the model's "
                       "code at a revision that is not a commit; pin --code-revision to the 40-character commit you reviewed, or "
                       "leave it out (the code is then the pinned vllm_model_revision's)" % (profile["name"], code_revision))
    revision = (inputs.get("overrides") or {}).get("model_revision") or profile["model"].get("revision")
    if COMMIT.match(str(revision or "")):
        return
    if inputs["settings"].get("trust_remote_code_unpinned"):
        findings.warn("%s runs %s's own Python (--trust-remote-code) at %s, which its owners can change under you: "
                      "vllm_trust_remote_code_unpinned is set. Pin vllm_model_revision to a commit to stop that"
                      % (profile["name"], model_id, "revision %s" % revision if revision else "the hub's main"))
        return
    findings.error("all", revision, "profile %s sets --trust-remote-code, so every node runs %s's own Python, but the revision "
                   "(%s) is not a commit: whoever can push to that repository runs code on your cluster. Set vllm_model_revision "
                   "to the 40-character commit you reviewed, or vllm_trust_remote_code_unpinned: true to accept the risk"
                   % (profile["name"], model_id, revision or "none, the hub's main"))


def parallel_sizes(inputs, findings):
    profile = inputs["profile"]
    parallel = profile.get("parallel", {})
    overrides = inputs.get("overrides") or {}
    tp = int(overrides.get("tensor_parallel_size") or parallel.get("tensor", 1))
    pp = int(overrides.get("pipeline_parallel_size") or parallel.get("pipeline", 1))
    dp = int(overrides.get("data_parallel_size") or parallel.get("data", 1))
    ep = bool(parallel.get("expert", False))
    nodes = len(inputs.get("order", []))
    gpus = nodes * inputs["settings"]["gpus_per_node"]
    if tp * pp * dp != gpus:
        findings.error("all", {"tp": tp, "pp": pp, "dp": dp},
                       "TP x PP x DP = %d x %d x %d = %d, but the inventory has %d node(s) with %d GPU(s) each = %d; profile %s "
                       "is for %s node(s): add or remove nodes, or choose another profile"
                       % (tp, pp, dp, tp * pp * dp, nodes, inputs["settings"]["gpus_per_node"], gpus, profile["name"],
                          parallel.get("nodes", "?")))
    check_pipeline(inputs, findings, pp, nodes)
    return {"tensor_parallel_size": tp, "pipeline_parallel_size": pp, "data_parallel_size": dp,
            "expert_parallel": ep, "world_size": tp * pp * dp, "nodes": nodes, "gpus": gpus}


# Seed 003 (MiniMax-M2.5 NVFP4 on two Sparks, Ray), line 288: "PP=2 + Marlin | 13.5 tok/s (1 req) | Ray channel crash on 2nd".
PIPELINE_CRASH = ("seed 003 ran PP=2 across two Sparks with Ray and it crashed on the second request (\"Ray channel crash on 2nd\", "
                  "13.5 tok/s on the first; TP=2 with EP was stable at 16.1-17.5 tok/s)")


def check_pipeline(inputs, findings, pp, nodes):
    """Pipeline parallelism across nodes: refused with Ray, where the write-up's run crashed, unless the inventory
    accepts it (warned); warned with mp, which no write-up ran."""
    if pp < 2 or nodes < 2:
        return
    name = inputs["profile"].get("name")
    if inputs.get("backend") != "ray":
        findings.warn("profile %s: PP=%d across nodes with the mp backend, which no write-up ran; %s" % (name, pp, PIPELINE_CRASH))
    elif inputs["settings"].get("pipeline_across_nodes"):
        findings.warn("profile %s: PP=%d across nodes with Ray (vllm_pipeline_across_nodes is set): %s" % (name, pp, PIPELINE_CRASH))
    else:
        findings.error("all", pp, "profile %s: PP=%d spans the nodes with Ray: %s. Split the model with TP (and EP for a MoE) across "
                       "the nodes instead, or set vllm_pipeline_across_nodes: true to try it (warned)" % (name, pp, PIPELINE_CRASH))


def utilization(inputs, findings):
    """The share of each node's memory vLLM requests: the inventory's override, else the profile's."""
    vllm = inputs["profile"].get("vllm") or {}
    value = float((inputs.get("overrides") or {}).get("gpu_memory_utilization") or vllm.get("gpu_memory_utilization", 0.8))
    if not 0 < value <= 1:
        findings.error("all", value, "gpu_memory_utilization must be in (0, 1], got %g; vLLM requests that share of "
                       "each node's memory" % value)
    return value


# Where each kind of secret goes instead: never on a command line, in an environment dump or in plan.json.
SECRET_HOMES = {"--api-key": "vllm_api_key", "VLLM_API_KEY": "vllm_api_key", "HF_TOKEN": "vllm_hf_token",
                "HUGGING_FACE_HUB_TOKEN": "vllm_hf_token"}


# A name whose last word is one of these, or that holds one of the pairs anywhere, carries a secret: the common
# providers' names (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, OPENAI_KEY, ANTHROPIC_API_KEY, GITHUB_TOKEN, DB_PASSWD,
# GOOGLE_APPLICATION_CREDENTIALS, --hf-token, --api-key). TOKENIZERS_PARALLELISM and --max-num-batched-tokens are not.
SECRET_LAST_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIALS", "CREDENTIAL", "PAT")
SECRET_WORDS = ("SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "CREDENTIALS", "API_KEY", "ACCESS_KEY", "PRIVATE_KEY",
                "AUTH_TOKEN", "SESSION_TOKEN")


def secret_name(name, flag=False):
    """True when a flag or variable name says it carries a secret (SECRET_LAST_WORDS, SECRET_WORDS)."""
    name = str(name).upper()
    if flag:
        name = name.lstrip("-").replace("-", "_")
    words = name.split("_")
    joined = "_" + name + "_"
    return words[-1] in SECRET_LAST_WORDS or any("_%s_" % word in joined for word in SECRET_WORDS)


def check_secrets(inputs, findings):
    """Refuse secrets in vllm_extra_flags and vllm_extra_env, and in the profile's own flags and env: all reach argv,
    every container's environment and plan.json. The finding names the flag or variable, never its value, and says
    where the secret goes instead."""
    profile = inputs["profile"]
    profile_flags, extra_flags = ((where, holder.get(key)) for where, holder, key in flag_sources(inputs))
    sources = (extra_flags + (True, "on vLLM's command line"),
               ("vllm_extra_env", inputs.get("extra_env"), False, "in every container's environment"),
               profile_flags + (True, "on vLLM's command line"),
               ("profile %s: env" % profile.get("name"), profile.get("env"), False, "in every container's environment"))
    for where, given, flag, lands in sources:
        for key in sorted(given or {}) if isinstance(given, dict) else ():
            if secret_name(key, flag):
                findings.error("all", key, "%s carries %s, a secret: it would be %s and in plan.json. Give it with %s instead "
                               "(a credential or Ansible Vault); nothing was changed"
                               % (where, key, lands, SECRET_HOMES.get(key, "a variable the collection keeps in a 0600 file")))


def ring_plan(inputs, findings):
    """A switchless ring (spark_fabric_ring): every problem named (ring.check, with the probed connection interfaces
    and networks once the nodes are read), else its links, addresses and each node's ends; None without a ring."""
    given = inputs["settings"].get("ring")
    if not given:
        return None
    nodes = inputs.get("nodes") or {}
    order = inputs.get("order", [])
    connection = {n: nodes[n]["connection_interface"] for n in order if (nodes.get(n) or {}).get("connection_interface")}
    networks = {n: nodes[n]["interfaces"] for n in order if (nodes.get(n) or {}).get("interfaces")}
    problems, planned = ring_links.checked_plan(given, order, connection, networks)
    for host, value, message in problems:
        findings.error(host, value, message)
    return planned
