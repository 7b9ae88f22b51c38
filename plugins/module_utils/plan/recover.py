# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""recover.yml's decision: from what status.yml reads, name what is wrong and the least that restores service.

The least, in order of what is found:

- a node that does not answer: wait for it (up to ``vllm_recover_wait``), then refuse, naming it and saying the model
  needs every node of the plan (TP x PP ranks across N nodes; no subset serves it);
- a node whose Ray container is not running, or a node missing from Ray: start again from the head (the head's Ray
  container first when it is the one, then every worker joins it, then vLLM: what serve.yml's plan does when it
  finds them so);
- every node joined but vLLM is gone: restart the ranks (vLLM's process group on the head, its Ray workers with it),
  nothing else; when it runs and does not answer, wait for it first (it may be loading), then restart them;
- everything answers: nothing.

Pure: the playbook reads the nodes, Ray, vLLM's process and the endpoint, and acts on the answer.
"""

from __future__ import annotations

ACTIONS = ("none", "wait_for_nodes", "restart_from_head", "restart_ranks")


def decide(nodes, head, ray=None, vllm=None, endpoint=None, backend="ray"):
    """``nodes``: {name: status.node() entries}; ``ray``: ray_cluster_info's result or None; ``vllm``: vllm_process's
    probed result on the head or None; ``endpoint``: vllm_endpoint_info's ``endpoint``. Returns {"action", "reasons",
    "nodes"}: the nodes it concerns."""
    unreachable = sorted(n for n, e in nodes.items() if not (e or {}).get("reachable", True))
    if unreachable:
        return {"action": "wait_for_nodes", "nodes": unreachable,
                "reasons": ["%s does not answer" % n for n in unreachable]}
    stopped = sorted(n for n, e in nodes.items()
                     if not any(c.get("State") == "running" for c in (e or {}).get("containers") or []))
    state = (ray or {}).get("ray") or {}
    missing = sorted(n for n, e in nodes.items() if state and e.get("fabric_ip") in (state.get("missing_ips") or []))
    if backend == "ray" and (stopped or missing or (ray is not None and not state)):
        reasons = ["%s: its container is not running" % n for n in stopped]
        reasons += ["%s: missing from Ray" % n for n in missing if n not in stopped]
        if ray is not None and not state:
            reasons.append("Ray does not answer on the head (%s)" % ((ray or {}).get("msg") or "no answer"))
        return {"action": "restart_from_head", "nodes": sorted(set(stopped + missing)) or [head], "reasons": reasons}
    if backend != "ray" and stopped:
        return {"action": "restart_from_head", "nodes": stopped,
                "reasons": ["%s: its container is not running" % n for n in stopped]}
    endpoint = endpoint or {}
    if endpoint.get("ready"):
        return {"action": "none", "nodes": [], "reasons": []}
    if vllm is not None and not vllm.get("running"):
        lines = [line.strip() for line in (vllm.get("log_tail") or []) if line.strip()]
        tail = ([line for line in lines if "Error" in line or "died" in line] or lines)[-1:]
        return {"action": "restart_ranks", "nodes": [head], "loading": False,
                "reasons": ["vLLM is not running on %s%s" % (head, (": its log says: " + tail[0]) if tail else "")]}
    # It runs and does not serve: loading (the node's supervisor may have just started it), or hung. The playbook waits
    # for it first, and restarts the ranks only when it still does not answer.
    return {"action": "restart_ranks", "nodes": [head], "loading": True,
            "reasons": ["vLLM runs on %s but the endpoint does not serve (%s)" % (head, "; ".join(endpoint.get("errors") or ["no answer"]))]}


def refusal(nodes, plan_nodes, waited):
    """The message when nodes did not come back within the wait."""
    return ("%s did not answer within %d s; the model is planned across %d nodes (%s) and no subset serves it. Bring "
            "%s back (power, network, SSH), then run recover.yml again; or plan another profile for the nodes that remain"
            % (", ".join(nodes), waited, len(plan_nodes), ", ".join(plan_nodes), " and ".join(nodes)))


def line(decision):
    """A decision as recover.yml says it."""
    if decision["action"] == "none":
        return "Nothing to recover: every node, Ray and the endpoint serve"
    return "%s (%s): %s" % (decision["action"], ", ".join(decision["nodes"]), "; ".join(decision["reasons"]))


def decide_each(states):
    """recover.yml's decision for each deployment it acts on, from state.yml's ``cluster_states`` (each deployment's
    nodes, head, Ray, vLLM and endpoint, by name), each decided on its own: {"decisions": {name: decision}, "lines":
    one per deployment (named when several), "wait_for": the nodes any of them waits for, "restart_ranks": {name:
    whether its vLLM may be loading} of those whose ranks restart, "act": whether serve.yml runs afterwards}."""
    decisions = {name: decide(s["nodes"], s["head"], s.get("ray"), s.get("vllm"), s.get("endpoint"), s.get("backend") or "ray")
                 for name, s in states.items()}
    lines = [line(d) if len(decisions) == 1 else "deployment %s: %s" % (name, line(d)) for name, d in decisions.items()]
    return {"decisions": decisions, "lines": lines,
            "wait_for": sorted({n for d in decisions.values() if d["action"] == "wait_for_nodes" for n in d["nodes"]}),
            "restart_ranks": {name: bool(d.get("loading")) for name, d in decisions.items() if d["action"] == "restart_ranks"},
            "act": any(d["action"] != "none" for d in decisions.values())}
