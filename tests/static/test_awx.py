"""What AWX gets from this repository: an execution environment ansible-builder can render, the project's collection
requirements, and job templates whose surveys cannot drift from the roles' argument specs."""

import glob
import importlib.util
import json
import os
import re

import pytest
import yaml

from runner import ROOT, run

SURVEY_TYPES = {"text": "str", "textarea": "str", "password": "str", "multiplechoice": "str",
                "multiselect": "list", "integer": "int", "float": "float"}


def script(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "scripts", name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


INVENTORY_DOC = script("inventory_doc")
# (role, entry point) for every role a playbook runs, as docs/inventory.md's generator reads them.
role_entry_points = INVENTORY_DOC.role_entry_points


def load(*path):
    """YAML with Ansible's !unsafe tag (AWX injector templates)."""
    return INVENTORY_DOC.load(os.path.join(ROOT, *path))


def module_options(name):
    rc, out = run("doc-" + name, ["ansible-doc", "--json", name])
    return json.loads(out)[name]["doc"]["options"]


def documented_options(playbook):
    """{variable: (role, entry point, spec)} from the argument specs of every role the playbook runs."""
    options = {}
    for role, entry in role_entry_points(playbook):
        path = os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")
        if not os.path.exists(path):
            continue
        specs = load("roles", role, "meta", "argument_specs.yml")["argument_specs"]
        for name, spec in (specs.get(entry) or {}).get("options", {}).items():
            options.setdefault(name, (role, entry, spec))
    return options


def templates():
    return load("awx", "job_templates.yml")["dgx_spark_awx_job_templates"]


def shipped_profiles():
    return sorted(os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(ROOT, "profiles", "*.yml")))


def test_a_template_for_each_playbook_an_operator_runs():
    by_playbook = {t["playbook"]: t for t in templates()}
    assert sorted(by_playbook) == ["playbooks/bench.yml", "playbooks/logs.yml", "playbooks/plan.yml", "playbooks/recover.yml", "playbooks/serve.yml",
                                   "playbooks/status.yml", "playbooks/teardown.yml", "playbooks/upgrade.yml"]
    for playbook in by_playbook:
        assert os.path.exists(os.path.join(ROOT, playbook))
    for playbook in ("playbooks/plan.yml", "playbooks/serve.yml"):
        variables = [q["variable"] for q in by_playbook[playbook]["survey_spec"]["spec"]]
        assert variables == ["vllm_profile", "vllm_backend", "vllm_max_model_len", "vllm_gpu_memory_utilization"]
    # Two serve or teardown jobs on one cluster at once would fight over its containers.
    assert not by_playbook["playbooks/serve.yml"]["allow_simultaneous"]
    assert not by_playbook["playbooks/teardown.yml"]["allow_simultaneous"]
    assert not by_playbook["playbooks/recover.yml"]["allow_simultaneous"]
    assert not by_playbook["playbooks/upgrade.yml"]["allow_simultaneous"]
    assert [q["variable"] for q in by_playbook["playbooks/upgrade.yml"]["survey_spec"]["spec"]] == ["vllm_image", "vllm_profile"]


@pytest.mark.parametrize("template", templates(), ids=lambda t: t["name"])
def test_every_survey_variable_is_documented_with_its_type_and_choices(template):
    if not template["survey_enabled"]:
        assert "survey_spec" not in template
        return
    options = documented_options(os.path.basename(template["playbook"]))
    for question in template["survey_spec"]["spec"]:
        variable = question["variable"]
        assert variable in options, "%s: survey variable %s is no documented variable of %s's roles" % (
            template["name"], variable, template["playbook"])
        role, entry, spec = options[variable]
        where = "%s (roles/%s/meta/argument_specs.yml, entry point %s)" % (variable, role, entry)
        assert SURVEY_TYPES[question["type"]] == spec.get("type", "str"), "%s: survey type %s, spec type %s" % (
            where, question["type"], spec.get("type"))
        if "choices" in spec:
            assert question["type"] in ("multiplechoice", "multiselect"), where
            assert question["choices"] == spec["choices"], where
        elif question["type"] in ("multiplechoice", "multiselect"):
            # An open string the planner checks: the survey offers exactly the production profiles that ship.
            assert variable == "vllm_profile", "%s: survey choices the spec does not have" % where
            assert sorted(question["choices"]) == [p for p in shipped_profiles() if not p.startswith("sim_")]
        # A survey asks, it never overrides: AWX sends a default as though the operator chose it, over the inventory's
        # value. Left empty, a question passes nothing; only the upgrade's image must be answered (upgrade to what?).
        assert "default" not in question, "%s: a default overrides the inventory's value" % where
        assert not question.get("required") or (template["playbook"], variable) == ("playbooks/upgrade.yml", "vllm_image"), where
        assert set(question) <= {"question_name", "question_description", "variable", "type", "choices", "default",
                                 "required", "min", "max", "new_question"}, where


def test_every_template_takes_the_documented_variables_at_launch():
    """AWX's "extra variables" on launch: what a survey does not ask is given there, as ansible-playbook -e gives it."""
    for template in templates():
        assert template.get("ask_variables_on_launch") is True, template["name"]
    assert "ask_variables_on_launch: \"{{ item.ask_variables_on_launch" in open(os.path.join(ROOT, "playbooks", "awx.yml"), encoding="utf-8").read()


def test_survey_bounds_match_what_the_planner_accepts():
    spec = {q["variable"]: q for q in templates()[0]["survey_spec"]["spec"]}
    utilization = spec["vllm_gpu_memory_utilization"]
    assert 0 < utilization["min"] and utilization["max"] <= 1  # the planner refuses beyond (0, 1]


def test_templates_and_credential_types_are_in_the_awx_modules_shape():
    job_template = module_options("awx.awx.job_template")
    for template in templates():
        assert set(template) <= set(job_template), set(template) - set(job_template)
        assert template["job_type"] in job_template["job_type"]["choices"]
    credential_type = module_options("awx.awx.credential_type")
    for kind in load("awx", "credential_types.yml")["dgx_spark_awx_credential_types"]:
        assert set(kind) <= set(credential_type)
        assert kind["kind"] in credential_type["kind"]["choices"]
        fields = {f["id"]: f for f in kind["inputs"]["fields"]}
        assert set(kind["inputs"]["required"]) <= set(fields)
        # Every variable a credential injects is one the playbooks document (and so read); a secret field's is no_log.
        documented = documented_options("serve.yml")
        for variable, template in kind["injectors"]["extra_vars"].items():
            assert variable in documented, variable
            field = re.match(r"\{\{\s*(\w+)", template).group(1)
            assert field in fields
            if fields[field].get("secret"):
                assert documented[variable][2].get("no_log"), "%s carries a secret: no_log in its spec" % variable


def test_the_awx_setup_playbook_passes_syntax_check():
    run("awx-syntax", ["ansible-playbook", "--syntax-check", "playbooks/awx.yml"])


def test_project_collection_requirements_match_galaxy_dependencies():
    wanted = load("galaxy.yml")["dependencies"]
    listed = {c["name"]: c["version"] for c in load("collections", "requirements.yml")["collections"]}
    assert listed == wanted


def test_ansible_builder_renders_the_execution_environment(tmp_path):
    context = tmp_path / "context"
    run("ee-create", ["ansible-builder", "create", "-f", "execution-environment.yml", "-c", str(context),
                      "--output-filename", "Containerfile"])
    containerfile = (context / "Containerfile").read_text()
    pins = {line.split("==")[0]: line for line in open(os.path.join(ROOT, "requirements-dev.txt"), encoding="utf-8")
            if "==" in line}
    assert pins["ansible-core"].strip() in containerfile and pins["ansible-runner"].strip() in containerfile
    for source, built in (("requirements.txt", "requirements.txt"), ("bindep.txt", "bindep.txt"),
                          ("collections/requirements.yml", "requirements.yml")):
        with open(os.path.join(ROOT, source), encoding="utf-8") as handle:
            assert (context / "_build" / built).read_text() == handle.read(), source
    # this checkout, as a collection artifact, installed where every job finds it (the callback the image names)
    assert "ansible-galaxy collection install --no-deps --collections-path /usr/share/ansible/collections" in containerfile
    assert containerfile.index("collection install --no-deps") < containerfile.index("ORIGINAL_STDOUT_CALLBACK=dgx_spark.vllm.progress")


def test_the_collection_declares_its_controller_needs_to_ansible_builder():
    rc, out = run("ee-introspect", ["ansible-builder", "introspect", "--sanitize", ".collections"])
    data = yaml.safe_load(out)
    python = [line.split("#")[0].strip() for line in data["python"] if "dgx_spark.vllm" in line]
    with open(os.path.join(ROOT, "requirements.txt"), encoding="utf-8") as handle:
        needs = [line.split("#")[0].strip() for line in handle if line.split("#")[0].strip()]
    # PyYAML comes with ansible-core, so ansible-builder leaves it out.
    assert python == [n for n in needs if not n.lower().startswith("pyyaml")]
    assert any(line.startswith("openssh-clients [platform:rpm]") for line in data["system"])
