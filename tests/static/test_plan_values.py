"""The plan is the only source of derived values: task files, role defaults and playbooks may reference plan fields,
role defaults, the variables plays and tasks define, and documented inventory variables; they may not build a path, a
URL, a file name or a label key from parts. An allow-list, read from what each file really says: every Jinja
expression is parsed (jinja2's own parser), every name it reads is looked up, and what it builds is judged, so a new
way of building a path is caught without listing it first. The simulated cluster's own role (which makes the nodes the
plan is made for) is not part of the collection's plan."""

import glob
import os
import re

import jinja2
from jinja2 import nodes
import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIPPED = ("roles/sim_cluster/",)
# Fields whose value is a bare Jinja expression (no {{ }}).
EXPRESSIONS = ("when", "that", "until", "failed_when", "changed_when")
# Fields that say what, for a person: they may quote a value, never build one that is used.
WORDS = ("name", "msg", "fail_msg", "success_msg", "label", "description", "short_description")
# Ansible's own names, and Jinja's.
MAGIC = {"inventory_hostname", "inventory_hostname_short", "hostvars", "groups", "group_names", "item", "role_path",
         "playbook_dir", "inventory_dir", "omit", "ansible_check_mode", "ansible_play_hosts", "ansible_play_hosts_all",
         "ansible_play_batch", "ansible_failed_task", "ansible_failed_result", "ansible_loop", "ansible_host",
         "ansible_playbook_python", "ansible_diff_mode", "ansible_facts", "ansible_user", "lookup", "query", "q", "now", "range", "dict",
         "true", "false", "none", "True", "False", "None", "undef", "loop", "namespace", "zip"}
# A label the collection puts on what it makes: only the plan (module_utils/plan/labels.py) spells one.
LABEL_KEY = re.compile(r"dgx_spark\.vllm\.(managed|cluster|node|role|config_hash)\b")
# Literal text beside an expression that makes it a path, a URL, a port, a file name or a name of ours.
BESIDE_AFTER = re.compile(r"^(/|:\d|:/|\.[A-Za-z]|-[a-z])")
BESIDE_BEFORE = re.compile(r"(/|://|[A-Za-z0-9]\.|[a-z]-|=)$")
# In a message, what a person reads: only a path built from parts is a derived value there.
PATH_AFTER = re.compile(r"^/[A-Za-z_][\w.-]+")
PATH_BEFORE = re.compile(r"\w/$")
# Paths that are no value of any plan: the password lookup's way to make a secret without storing it, and the
# kernel's own trees, where the probes read unless the inventory points them elsewhere (spark_probe_*).
ALLOWED_PATHS = ("/dev/null", "/proc", "/sys")


def files():
    found = []
    for pattern in ("roles/*/tasks/*.yml", "roles/*/defaults/*.yml", "roles/*/handlers/*.yml", "playbooks/*.yml",
                    "playbooks/tasks/*.yml"):
        found += [os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern))]
    return sorted(p for p in set(found) if not p.startswith(SKIPPED))


def strings(data, key=None):
    """(key, text) of every string a YAML document holds, with the key it is the value of."""
    if isinstance(data, dict):
        for k, v in data.items():
            yield from strings(v, k)
    elif isinstance(data, list):
        for v in data:
            yield from strings(v, key)
    elif isinstance(data, str):
        yield key, data


def defined_names():
    """What the collection's plays and tasks define (vars, registers, facts, loop variables), role defaults and argument
    specs, and the inventory variables docs/inventory.md documents."""
    names = set(MAGIC)
    for path in glob.glob(os.path.join(ROOT, "roles", "*", "defaults", "*.yml")) + glob.glob(os.path.join(ROOT, "awx", "*.yml")):
        with open(path, encoding="utf-8") as handle:  # awx/'s injectors are AWX's templates, tagged !unsafe
            names.update(re.findall(r"^([a-z][a-z0-9_]*):", handle.read(), re.M))
    for path in glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml")):
        for spec in (yaml.safe_load(open(path, encoding="utf-8")) or {}).get("argument_specs", {}).values():
            names.update((spec.get("options") or {}).keys())
    for path in glob.glob(os.path.join(ROOT, "docs", "*.md")):  # inventory.md, and the AWX and simulation variables
        with open(path, encoding="utf-8") as handle:
            names.update(re.findall(r"`([a-z][a-z0-9_]+)`", handle.read()))
    for path in glob.glob(os.path.join(ROOT, "roles", "*", "*", "*.yml")) + glob.glob(os.path.join(ROOT, "playbooks", "*.yml")) \
            + glob.glob(os.path.join(ROOT, "playbooks", "tasks", "*.yml")):
        walk_definitions(yaml.safe_load(open(path, encoding="utf-8")), names)
    return names


def walk_definitions(data, names):
    if isinstance(data, dict):
        for key in ("vars", "set_fact", "ansible.builtin.set_fact"):
            if isinstance(data.get(key), dict):
                names.update(k for k in data[key] if k != "cacheable")
        if isinstance(data.get("register"), str):
            names.add(data["register"])
        if isinstance(data.get("loop_control"), dict) and data["loop_control"].get("loop_var"):
            names.add(data["loop_control"]["loop_var"])
        for value in data.values():
            walk_definitions(value, names)
    elif isinstance(data, list):
        for value in data:
            walk_definitions(value, names)


ENV = jinja2.Environment()
# Jinja's `a.b` looks for the attribute first: a key named like one of a dict's methods reads the method.
DICT_METHODS = {n for n in dir(dict) if not n.startswith("_")}


def template_of(key, text):
    """The Jinja template of a field, or None when it holds none."""
    if key in EXPRESSIONS and "{{" not in text:
        return "{{ %s }}" % text
    return text if "{{" in text or "{%" in text else None


def judge(key, text, known):
    """What is wrong with one field's value: each a sentence."""
    wrong = []
    if LABEL_KEY.search(text) and key not in WORDS:
        wrong.append("a label key spelled here: take it from the plan (module_utils/plan/labels.py)")
    source = template_of(key, text)
    if source is None:
        return wrong
    try:
        tree = ENV.parse(source)
    except jinja2.TemplateSyntaxError as exc:
        return wrong + ["not Jinja: %s" % exc]
    stored = {n.name for n in tree.find_all(nodes.Name) if n.ctx == "store"}
    for name in sorted({n.name for n in tree.find_all(nodes.Name) if n.ctx == "load"} - stored - known):
        wrong.append("reads %s, which no play, role default, argument spec or docs/inventory.md defines" % name)
    words = key in WORDS
    for output in tree.find_all(nodes.Output):
        parts = output.nodes
        for index, part in enumerate(parts):
            if not isinstance(part, nodes.TemplateData):
                continue
            after = index > 0 and joined(parts[index - 1]) and (PATH_AFTER if words else BESIDE_AFTER).search(part.data)
            before = index + 1 < len(parts) and joined(parts[index + 1]) and (PATH_BEFORE if words else BESIDE_BEFORE).search(part.data)
            if after or before:
                wrong.append("builds %r from parts: take the whole value from the plan" % part.data)
    for concat in tree.find_all((nodes.Concat, nodes.Add, nodes.Mod)):
        operands = concat.nodes if isinstance(concat, nodes.Concat) else [concat.left, concat.right]
        consts = [c.value for c in operands if isinstance(c, nodes.Const) and isinstance(c.value, str)]
        if consts and not words:
            wrong.append("joins %r to a value: take the whole value from the plan" % consts)
        elif any(c.startswith("/") or c.endswith("/") or LABEL_KEY.search(c) for c in consts):
            wrong.append("builds a path or a label key (%r), even in a message" % consts)
    called = {id(c.node) for c in tree.find_all(nodes.Call)}
    for attr in tree.find_all(nodes.Getattr):
        if attr.attr in DICT_METHODS and id(attr) not in called:
            wrong.append("reads .%s, which Jinja gives as the dict's method, not the key: rename the key" % attr.attr)
    for const in tree.find_all(nodes.Const):
        if isinstance(const.value, str) and const.value not in ALLOWED_PATHS and (
                const.value.startswith("/") or "://" in const.value or LABEL_KEY.search(const.value)) and not words:
            wrong.append("spells a path, URL or label key (%r): take it from the plan" % const.value)
    return wrong


def joined(node):
    """An expression text is joined to: not literal text, nor Jinja's own braces quoted (a Go template of docker's)."""
    return not isinstance(node, nodes.TemplateData) and not (isinstance(node, nodes.Const) and node.value in ("{{", "}}"))


def offending(path, known=None):
    known = defined_names() if known is None else known
    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
        data = yaml.safe_load(handle)
    return ["%s: %s: %s -> %s" % (path, key, " ".join(text.split())[:100], why)
            for key, text in strings(data) for why in judge(key, text, known)]


KNOWN = defined_names()


def test_the_scan_sees_each_offender_put_back():
    """The values this collection once built in YAML, each put back: the test must fail on every one."""
    planted = {
        "the per-deployment key file": ("path", "{{ preflight_api_key_file ~ '-' ~ item }}"),
        "plan.json": ("path", "{{ preflight_artifacts_dir }}/plan.json"),
        "the host-side vllm.log": ("dest", "{{ vllm_serve_plan.nodes[inventory_hostname].paths.logs_dir }}/vllm.log"),
        "/health": ("url", "{{ vllm_serve_plan.cluster.endpoint.url }}/health"),
        "a label key in a filter": ("argv", "label=dgx_spark.vllm.cluster={{ teardown_plan.cluster.name }}"),
        "a label key looked up": ("that", "found.container.Config.Labels['dgx_spark.vllm.managed'] == 'true'"),
        "a URL": ("url", "http://{{ inventory_hostname }}:{{ vllm_port }}/v1"),
        "a container name": ("name", "{{ vllm_cluster_name }}-ray-{{ inventory_hostname }}"),
        "an undocumented variable": ("when", "vllm_undocumented_switch | bool"),
        "a path in an expression": ("path", "{{ '/var/lib/dgx-spark-vllm' if true else '' }}"),
        "a key named like a dict's method": ("loop", "{{ model_files.model.copy.oversized }}"),
    }
    for what, (key, text) in planted.items():
        if what == "a container name":  # a task's name says what; a container's is a value (the docker module's name)
            key = "container"
        assert judge(key, text, KNOWN), what
    for fine in ("{{ serve_plan.nodes[inventory_hostname].paths.baseline_file }}", "{{ gateway_plan.api_url }}",
                 "{{ inventory_hostname }}: a container named {{ gateway_plan.container.name }} runs here",
                 "serve_plan.cluster.apply_needed"):
        assert not judge("msg" if ": " in fine else "path", fine, KNOWN), fine


@pytest.mark.parametrize("path", files())
def test_no_role_or_playbook_builds_a_value_of_the_plan(path):
    assert offending(path, KNOWN) == []


def test_the_documented_defaults_are_the_planners():
    """One set of defaults: preflight passes null for what the inventory leaves unset, the planner fills it in; the
    argument specs (and the AWX surveys made from them) document the same values."""
    from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.base import DEFAULT_SETTINGS

    with open(os.path.join(ROOT, "roles", "preflight", "defaults", "main.yml"), encoding="utf-8") as handle:
        settings = yaml.safe_load(handle)["preflight_settings"]
    with open(os.path.join(ROOT, "roles", "preflight", "meta", "argument_specs.yml"), encoding="utf-8") as handle:
        options = yaml.safe_load(handle)["argument_specs"]["inventory"]["options"]
    checked = 0
    for key, template in settings.items():
        match = re.match(r"\{\{ (\w+) \| default\(none\) \}\}$", str(template))
        if not match:
            continue
        assert key in DEFAULT_SETTINGS, key
        documented = (options.get(match.group(1)) or {}).get("default")
        if documented is not None:
            assert documented == DEFAULT_SETTINGS[key], "%s: documented %r, the planner uses %r" % (match.group(1), documented, DEFAULT_SETTINGS[key])
            checked += 1
    assert checked >= 5
