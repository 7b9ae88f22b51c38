"""The seed deployments side by side with the plans of their profiles.

Reads the write-ups' commands kept as data in tests/seeds/*.yml (each value quoting the write-up, file and line),
plans each profile on the sample inventory (tests/unit/helpers.py: two or three Sparks with captured probe facts)
and compares them row by row. ``python scripts/seed_tables.py`` rewrites the tables in docs/profiles.md;
tests/unit/plan/test_seed_profiles.py checks every row and that the document is up to date.
"""

import copy
import os
import sys
import tempfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEEDS_DATA = os.path.join(ROOT, "tests", "seeds")
SEEDS_TEXT = os.path.join(os.path.dirname(ROOT), "shared", "reference", "seeds")
DOC = os.path.join(ROOT, "docs", "profiles.md")
BEGIN, END = "<!-- seed tables: begin (scripts/seed_tables.py writes this part) -->", "<!-- seed tables: end -->"
# Why the plan carries what a write-up does not state: the field fact (DESIGN.md) or the collection's policy.
ADDED = {
    "--uds": "the front door: vLLM serves on a socket only root and the door reach (docs/security.md)",
    "RAY_memory_monitor_refresh_ms": "fact 5", "RAY_prestart_worker_first_driver": "fact 5",
    "RAY_USAGE_STATS_ENABLED": "no usage reports from the cluster", "VLLM_HOST_IP": "fact 6",
    "VLLM_CONFIG_ROOT": "fact 7 (ray_non_carry_over_env_vars.json)", "HF_HOME": "models folder layout",
    "HF_HUB_OFFLINE": "the model role made the weights complete on every node", "NCCL_DEBUG": "the transport check",
    "NCCL_DEBUG_SUBSYS": "the transport check", "NCCL_IB_DISABLE": "fact 8", "NCCL_IB_HCA": "fact 8",
    "NCCL_IB_GID_INDEX": "fact 8", "NCCL_NET_GDR_LEVEL": "fact 8", "NCCL_NET": "fact 8 (strict mode)",
    "NCCL_SOCKET_IFNAME": "fact 8", "GLOO_SOCKET_IFNAME": "fact 8", "TP_SOCKET_IFNAME": "fact 8",
    "UCX_NET_DEVICES": "fact 8", "OMPI_MCA_btl_tcp_if_include": "fact 8",
    "--object-store-memory": "fact 5", "--node-ip-address": "fact 6", "--num-gpus": "one GPU per Spark",
    "--include-dashboard=false": "fact 20", "--disable-usage-stats": "no usage reports", "--block": "Ray in the foreground",
    "--head": "Ray head", "--port": "Ray GCS port", "--address": "Ray head address",
    "--host": "policy (endpoint exposure)", "--served-model-name": "the profile's served name",
    "--distributed-executor-backend": "fact 1", "devices": "fact 8", "capabilities": "fact 8", "ulimits": "fact 8",
    "network_mode": "fact 8", "ipc_mode": "fact 8", "gpus": "one GPU per Spark", "restart_policy": "fact 16 (no --rm)",
}


def load_seed(name):
    with open(os.path.join(SEEDS_DATA, name + ".yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def seed_names():
    return sorted(os.path.splitext(f)[0] for f in os.listdir(SEEDS_DATA) if f.endswith(".yml"))


def seed_lines(seed):
    with open(os.path.join(SEEDS_TEXT, seed["seed"]), encoding="utf-8") as handle:
        return handle.read().split("\n")


def _option(argv, name):
    if name not in argv:
        return None
    index = argv.index(name)
    if index + 1 < len(argv) and not str(argv[index + 1]).startswith("--"):
        return argv[index + 1]
    return True


def plan_value(plan, row):
    """What the plan carries for one row of a write-up's command (None: the plan does not set it)."""
    head = plan["nodes"][plan["head"]]
    spec = head["containers"][0]
    kind, name = row["kind"], row["name"]
    if kind == "flag" and name in ("--host", "--port") and plan["cluster"].get("door"):  # vLLM serves on a socket behind the door
        return plan["cluster"]["door"]["listen"].rsplit(":", 1)[name == "--port"] + " (the front door's)"
    if kind == "flag":
        return _option(plan["cluster"]["vllm_argv"], name)
    if kind == "env":
        return head["env"].get(name)
    if kind == "ray":  # the head's ray start, or a worker's for what only workers have (--address)
        found = _option(spec["command"], name)
        if found is None:
            last = plan["nodes"][plan["nodes_order"][-1]]["containers"][0]
            found = _option(last["command"], name)
        return found
    if kind == "model":
        return plan["model"]["id"] if name == "id" else plan["cluster"]["endpoint"]["served_model_name"]
    if kind == "cluster":
        return plan["cluster"].get(name)
    if kind == "docker":
        if name == "--rm":
            return "yes" if spec.get("auto_remove") else "no"
        if name.startswith("env "):
            return None
        value = spec.get(name)
        return ", ".join(value) if isinstance(value, list) else value
    if kind == "layout":
        return "vllm serve inside %s" % head["serve"]["container"] if head.get("serve") else None
    raise ValueError("unknown row kind %r" % kind)


def _norm(value):
    return str(value).replace("=", ":").strip()


def agrees(row, value):
    """Whether the plan's value is the write-up's."""
    if row["value"] is None or value is None:
        return row["value"] is None and value is None
    if row["kind"] == "docker":
        return _norm(row["value"]) in _norm(value)
    if row["value"] is True or value is True:
        return row["value"] is True and value is True
    return str(row["value"]) == str(value)


def sample_inputs(profile, nodes):
    if os.path.join(ROOT, "tests", "unit") not in sys.path:
        sys.path.insert(0, os.path.join(ROOT, "tests", "unit"))
    from helpers import spark_inputs  # pylint: disable=import-outside-toplevel

    return spark_inputs(profile, tempfile.mkdtemp(prefix="seed-plan-"), count=nodes)


def the_deployment(plan):
    """The one deployment of a plan made without vllm_deployments (the whole cluster, under its own name)."""
    return plan["deployments"][plan["deployment_order"][0]]


def seed_inputs(seed):
    """The seed's profile and the planner's inputs for it on the sample inventory."""
    from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import profiles

    profile = profiles.load(os.path.join(ROOT, "profiles", seed["profile"] + ".yml"))
    return profile, sample_inputs(profile, seed["nodes"])


def plan_restored(inputs, restore):
    """The plan of ``inputs`` with ``restore`` (inventory variables) applied."""
    from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import planner, profiles

    return planner.make_plan(profiles.apply_variables(copy.deepcopy(inputs), restore))


def plans(seed):
    """The profile, its plan on the sample inventory, and a plan per deviation with its restore applied."""
    from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import planner

    profile, inputs = seed_inputs(seed)
    plan = the_deployment(planner.make_plan(copy.deepcopy(inputs)))
    restored = {d["what"]: the_deployment(plan_restored(inputs, d["restore"])) for d in profile.get("deviations") or []}
    return profile, plan, restored


def _cell(value):
    if value is None:
        return "(not set)"
    if value is True:
        return "(flag)"
    return "`%s`" % str(value).replace("|", "\\|")


def table(name):
    """Markdown lines of one seed's side-by-side table."""
    seed = load_seed(name)
    profile, plan, dummy = plans(seed)
    deviations = {d["what"]: d for d in profile.get("deviations") or []}
    lines = ["### `%s` (seed %s)" % (seed["profile"], seed["seed"][:3]), "",
             "| what | write-up (file:line) | plan | status |", "|---|---|---|---|"]
    covered = set()
    for row in seed["rows"]:
        value = plan_value(plan, row)
        covered.add((row["kind"], row["name"]))
        status = row.get("status", "same")
        if status == "deviation":
            deviation = deviations[row["deviation"]]
            restore = yaml.safe_dump(deviation["restore"], default_flow_style=True, width=1000).strip()
            status = "deviation: %s Restore: `%s`" % (" ".join(deviation["reason"].split()), restore)
        elif status == "same" and not agrees(row, value):
            status = "DIFFERS"
        elif status == "chosen":
            status = "chosen: %s" % " ".join(row["reason"].split())
        said = _cell(row["value"]) if "not_stated" not in row else "(not stated; %s%s)" % (
            row["not_stated"], "" if row["value"] is None else ": " + _cell(row["value"]))
        cells = (row["kind"], row["name"], said, seed["seed"][:3], row["line"], _cell(value), status)
        lines.append("| %s `%s` | %s (%s:%d) | %s | %s |" % cells)
    head = plan["nodes"][plan["head"]]
    spec = head["containers"][0]
    added = []
    argv = plan["cluster"]["vllm_argv"]
    for item in argv[3:]:
        if str(item).startswith("--") and ("flag", item) not in covered:
            added.append(("flag", item, _option(argv, item)))
    for key, value in sorted(head["env"].items()):
        if ("env", key) not in covered:
            added.append(("env", key, value))
    for item in spec["command"][2:]:
        if str(item).startswith("--") and ("ray", item) not in covered:
            added.append(("ray", item, _option(spec["command"], item)))
    for key in ("network_mode", "ipc_mode", "gpus", "devices", "capabilities", "ulimits", "restart_policy"):
        if ("docker", key) not in covered:
            value = spec.get(key)
            added.append(("docker", key, ", ".join(value) if isinstance(value, list) else value))
    for kind, key, value in added:
        reason = ADDED.get(key) or ADDED.get(key.split("=")[0]) or "the profile (see its deviations and notes)"
        lines.append("| %s `%s` | (not stated) | %s | added: %s |" % (kind, key, _cell(value), reason))
    return lines


def document():
    with open(DOC, encoding="utf-8") as handle:
        text = handle.read()
    before, rest = text.split(BEGIN, 1)
    dummy, after = rest.split(END, 1)
    body = []
    for name in seed_names():
        body += table(name) + [""]
    return before + BEGIN + "\n" + "\n".join(body) + END + after


GOLDEN = os.path.join(ROOT, "tests", "unit", "golden")
GOLDEN_NODES = {"minimax_m3_nvfp4_tp3": 3}


def golden(name):
    """Every rank's whole container spec (command, env, devices, capabilities, ulimits, network, ipc, volumes,
    restart policy, labels) and vLLM's argv, as planned on the sample inventory."""
    from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import planner, profiles

    profile = profiles.load(os.path.join(ROOT, "profiles", name + ".yml"))
    plan = the_deployment(planner.make_plan(sample_inputs(profile, GOLDEN_NODES.get(name, 2))))
    return {node: {"containers": entry["containers"], "serve_argv": (entry.get("serve") or {}).get("argv")}
            for node, entry in plan["nodes"].items()}


def main():
    """Rewrite the tables of docs/profiles.md and, with --golden, the reviewed golden files (review the diff)."""
    import json  # pylint: disable=import-outside-toplevel

    sys.path.insert(0, os.path.join(ROOT, ".collections"))
    if "--golden" in sys.argv:
        for name in seed_names():
            with open(os.path.join(GOLDEN, name + ".json"), "w", encoding="utf-8") as handle:
                json.dump(golden(name), handle, indent=2, sort_keys=True)
                handle.write("\n")
            print("wrote %s" % os.path.join(GOLDEN, name + ".json"))
    write(DOC, document())


def write(path, text):
    """Write a generated document and say so."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    print("wrote %s" % path)


if __name__ == "__main__":
    main()
