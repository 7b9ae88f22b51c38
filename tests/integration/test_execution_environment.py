"""The execution environment AWX runs the job templates in, built and run here.

execution-environment.yml keeps the AWX-standard base (UBI 9, dnf, Galaxy); no container registry and no Galaxy are
reachable here. So the test builds the same definition with only these swapped (docs/awx.md says so):
- the base: Debian 12 made locally (the simulated cluster's debootstrap base, with Python 3.11 and pip), apt-get as the
  package manager, Debian's python3 (3.11, as the shipped base's python3.11);
- the collections of collections/requirements.yml are installed by the definition's own Galaxy step, from artifacts
  made of the copies this machine's `ansible` package carries (each one listed there, no other).
Python packages (requirements.txt, the collections' own), bindep.txt, ansible-core, ansible-runner and this checkout
as a collection artifact (its additional_build_files and the step that installs it) are the definition's. Then plan,
serve, status and teardown run inside the image with ansible-runner's process isolation, as AWX runs a job, against
the simulated cluster; an ad hoc job from a folder holding nothing of this project runs with the collection's
callback; and a check that imports what the playbooks need fails on an image that lacks it (the base) and passes on
the EE."""

import copy
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile

import ansible_runner
import pytest
import yaml

from runner import ROOT, environment, node_docker, run
from test_awx_jobs import API_KEY, SURVEY, assert_successful, awx_environment, chat, task_result

pytestmark = [pytest.mark.slow, pytest.mark.extended]

EE_IMAGE = "dgx-spark-vllm-ee:test"
BASE_IMAGE = "dgx-spark-vllm-ee-base:debian12"
OUTPUT = os.path.join(ROOT, "tests", "output")
# What the controller side imports, by the distribution requirements.txt names (matplotlib: bench.yml's plots;
# yaml: the profiles). community.docker's modules run on the nodes, so the image needs neither the Docker SDK nor requests.
IMPORTS = {"matplotlib": "matplotlib", "PyYAML": "yaml"}
CHECK = r"""
import importlib, json, subprocess, sys
missing = []
for name in sys.argv[1].split(","):
    try:
        importlib.import_module(name)
    except ImportError as exc:
        missing.append("python %s (%s)" % (name, exc))
for collection in sys.argv[2].split(","):
    try:
        listed = subprocess.run(["ansible-galaxy", "collection", "list", collection], capture_output=True, text=True).stdout
        found = any(line.split()[:1] == [collection] for line in listed.splitlines())  # its rc is 0 either way
    except OSError:  # no ansible-galaxy at all
        found = False
    if not found:
        missing.append("collection " + collection)
print(json.dumps(missing))
"""


def sim_base():
    tags = subprocess.run(["docker", "images", "dgx-spark-sim/base", "--format", "{{.Repository}}:{{.Tag}}"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert tags, "no simulation base image: sim.yml builds it"
    return tags[0]


def collections_wanted():
    with open(os.path.join(ROOT, "collections", "requirements.yml"), encoding="utf-8") as handle:
        return [c["name"] for c in yaml.safe_load(handle)["collections"]]


def installed_collection(name):
    """The copy of ``name`` this machine's ansible package carries (an installed collection: MANIFEST.json at its root,
    which is what a collection artifact holds)."""
    import ansible_collections
    for root in ansible_collections.__path__:
        folder = os.path.join(root, *name.split("."))
        if os.path.isfile(os.path.join(folder, "MANIFEST.json")):
            return folder
    raise AssertionError("%s is not installed here" % name)


def with_dependencies(names):
    """``names`` and what their MANIFEST.json files depend on, transitively, in a stable order."""
    found = []
    queue = list(names)
    while queue:
        name = queue.pop(0)
        if name in found:
            continue
        found.append(name)
        with open(os.path.join(installed_collection(name), "MANIFEST.json"), encoding="utf-8") as handle:
            queue += sorted(json.load(handle)["collection_info"].get("dependencies") or {})
    return found


def write_artifact(folder, artifact):
    """A collection artifact of an installed collection: its files at the root, FILES.json listing only those the
    ansible package kept (it leaves out CI files Galaxy's artifact had), MANIFEST.json naming that FILES.json's sum."""
    with open(os.path.join(folder, "FILES.json"), encoding="utf-8") as handle:
        files = json.load(handle)
    files["files"] = [f for f in files["files"] if f["name"] == "." or os.path.lexists(os.path.join(folder, f["name"]))]
    listed = json.dumps(files, indent=2).encode("utf-8")
    with open(os.path.join(folder, "MANIFEST.json"), encoding="utf-8") as handle:
        manifest = json.load(handle)
    manifest["file_manifest_file"]["chksum_sha256"] = hashlib.sha256(listed).hexdigest()
    with tarfile.open(artifact, "w:gz") as tar:
        for name, data in (("MANIFEST.json", json.dumps(manifest, indent=2).encode("utf-8")), ("FILES.json", listed)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        for entry in files["files"]:
            if entry["name"] != ".":
                tar.add(os.path.join(folder, entry["name"]), arcname=entry["name"], recursive=False)


def build_variant(context):
    """The shipped definition with the base, package manager and collection sources swapped; written to ``context``."""
    with open(os.path.join(ROOT, "execution-environment.yml"), encoding="utf-8") as handle:
        shipped = yaml.safe_load(handle)
    variant = copy.deepcopy(shipped)
    variant["images"]["base_image"]["name"] = BASE_IMAGE
    variant["dependencies"]["python_interpreter"] = {"package_system": "python3", "python_path": "/usr/bin/python3"}
    variant.setdefault("options", {})["package_manager_path"] = "/usr/bin/apt-get"
    # apt-get has no `clean all`; the collections' dependencies are artifacts here too, Galaxy is not asked for them.
    variant["build_arg_defaults"] = {"PKGMGR_PRESERVE_CACHE": "always", "ANSIBLE_GALAXY_CLI_COLLECTION_OPTS": "--no-deps"}
    artifacts, requirements = [], {"collections": []}
    for name in with_dependencies(collections_wanted()):
        artifact = os.path.join(context, "artifacts", "%s.tar.gz" % name.replace(".", "-"))
        os.makedirs(os.path.dirname(artifact), exist_ok=True)
        write_artifact(installed_collection(name), artifact)
        artifacts.append({"src": artifact, "dest": "collections"})
        requirements["collections"].append({"name": "/build/collections/%s" % os.path.basename(artifact), "type": "file"})
    with open(os.path.join(context, "requirements.yml"), "w", encoding="utf-8") as handle:
        yaml.safe_dump(requirements, handle)
    variant["dependencies"]["galaxy"] = os.path.join(context, "requirements.yml")
    variant["dependencies"]["python"] = os.path.join(ROOT, "requirements.txt")
    variant["dependencies"]["system"] = os.path.join(ROOT, "bindep.txt")
    variant["additional_build_files"] = shipped["additional_build_files"] + artifacts  # this checkout's, by its own glob
    variant["options"]["tags"] = [EE_IMAGE]
    path = os.path.join(context, "execution-environment.yml")
    with open(path, "w", encoding="utf-8") as handle:
        yaml.safe_dump(variant, handle, sort_keys=False)
    return shipped, variant, path


def check(image, extra=()):
    """What the playbooks need and ``image`` lacks: Python modules and collections."""
    out = subprocess.run(["docker", "run", "--rm", image, "python3", "-c", CHECK,  # through the image's entrypoint, as a job
                          ",".join(IMPORTS.values()), ",".join(collections_wanted() + list(extra))],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module", name="ee")
def fixture_execution_environment(tmp_path_factory):
    run("ee-sim-up", ["ansible-playbook", "playbooks/sim.yml"], timeout=1800)
    work = tmp_path_factory.mktemp("ee")
    base = work / "base"
    base.mkdir()
    ca = os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"
    shutil.copy(ca, base / "host-ca.crt")  # the CA pip trusts here (a proxy's, say), as the simulation's images get it
    (base / "Dockerfile").write_text("\n".join([
        "FROM " + sim_base(),
        "ENV DEBIAN_FRONTEND=noninteractive",
        "COPY host-ca.crt /usr/local/share/ca-certificates/host-ca.crt",
        "RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-pip python3-venv ca-certificates"
        " && update-ca-certificates && rm -f /usr/lib/python3*/EXTERNALLY-MANAGED",
        # ansible-builder runs `python3 -m ensurepip`, which Debian disables for its system Python; pip is there already
        "RUN printf 'import pip  # noqa\\n' > /usr/lib/python3.11/ensurepip/__main__.py",
        "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt", ""]))
    run("ee-base-build", ["docker", "build", "-t", BASE_IMAGE, str(base)], timeout=1800)
    # the definition's own first step, from this checkout: its artifact where the definition's glob finds it
    run("ee-collection", ["ansible-galaxy", "collection", "build", "--force", "--output-path", str(work / "build"), ROOT])
    shipped, variant, definition = build_variant(str(work))
    run("ee-build", ["ansible-builder", "build", "-f", definition, "-c", str(work / "context"), "-t", EE_IMAGE,
                     "--container-runtime", "docker", "-v", "2"], timeout=3600)
    size = int(subprocess.run(["docker", "image", "inspect", "--format", "{{.Size}}", EE_IMAGE], capture_output=True,
                              text=True, check=True).stdout)
    os.makedirs(OUTPUT, exist_ok=True)
    with open(os.path.join(OUTPUT, "execution-environment.json"), "w", encoding="utf-8") as handle:
        json.dump({"image": EE_IMAGE, "size_bytes": size, "base": BASE_IMAGE, "variant": variant}, handle, indent=2, default=str)
    print("execution environment %s: %.2f GB" % (EE_IMAGE, size / 1e9))
    yield {"work": work, "shipped": shipped, "variant": variant, "size": size}


def test_only_the_base_and_the_collection_sources_differ_from_the_shipped_definition(ee):
    shipped, variant = ee["shipped"], ee["variant"]
    assert shipped["images"]["base_image"]["name"] != variant["images"]["base_image"]["name"] == BASE_IMAGE
    for key in ("ansible_core", "ansible_runner"):
        assert variant["dependencies"][key] == shipped["dependencies"][key]
    assert os.path.basename(variant["dependencies"]["python"]) == shipped["dependencies"]["python"]
    assert os.path.basename(variant["dependencies"]["system"]) == os.path.basename(shipped["dependencies"]["system"])
    assert variant["additional_build_files"][0] == shipped["additional_build_files"][0]  # this checkout, installed
    assert variant["additional_build_steps"] == shipped["additional_build_steps"]
    with open(variant["dependencies"]["galaxy"], encoding="utf-8") as handle:
        sources = [c["name"] for c in yaml.safe_load(handle)["collections"]]
    installed = [os.path.basename(s)[:-len(".tar.gz")].replace("-", ".") for s in sources]
    assert installed[:len(collections_wanted())] == collections_wanted()  # then their dependencies, which Galaxy would add
    assert installed == with_dependencies(collections_wanted())


def test_the_check_names_what_an_image_lacks_and_the_ee_lacks_nothing(ee):
    lacking = check(BASE_IMAGE)
    assert {"python matplotlib", "collection community.docker"} <= {m.split(" (")[0] for m in lacking}, lacking
    assert check(EE_IMAGE, ["dgx_spark.vllm"]) == []
    assert "collection dgx_spark.vllm" in check(BASE_IMAGE, ["dgx_spark.vllm"])
    assert check(EE_IMAGE, ["nothere.atall"]) == ["collection nothere.atall"]  # the list is read, not only its rc


def ee_job(base, name, playbook, extravars):
    """One AWX job inside the execution environment: ansible-runner's process isolation runs ansible-playbook in a
    container of the image, the private data directory mounted, as AWX's receptor does."""
    from test_awx_jobs import awx_job_dir
    private, script = awx_job_dir(base, name)
    env = awx_environment("/runner")
    del env["ANSIBLE_CONFIG"]
    del env["PATH"]
    result = ansible_runner.run(private_data_dir=str(private), playbook=playbook, inventory=str(script),
                                extravars=extravars, envvars=env, quiet=True, timeout=1800, process_isolation=True,
                                process_isolation_executable="docker", container_image=EE_IMAGE,
                                container_options=["--network=host"])
    events = list(result.events)
    log = os.path.join(OUTPUT, "logs", "ee-%s.log" % name)
    with open(log, "w", encoding="utf-8") as handle:
        handle.write(result.stdout.read())
    return result, events, log


def test_plan_serve_status_teardown_run_inside_the_execution_environment(ee):
    base = ee["work"] / "jobs"
    base.mkdir()
    result, events, log = ee_job(base, "plan", "playbooks/plan.yml", dict(SURVEY, vllm_api_key=API_KEY))
    assert_successful(result, events, log)
    assert "sim-worker1" in task_result(events, "Show the plan")["msg"]
    result, events, log = ee_job(base, "serve", "playbooks/serve.yml", dict(SURVEY, vllm_api_key=API_KEY))
    assert_successful(result, events, log)
    status, answer = chat()
    assert status == 200 and answer["choices"][0]["message"]["content"]
    with open(log, encoding="utf-8") as handle:
        output = handle.read()
    assert "FAILED - RETRYING" not in output  # the EE sets the progress callback under AWX's own
    result, events, log = ee_job(base, "status", "playbooks/status.yml", {"vllm_api_key": API_KEY})
    assert_successful(result, events, log)
    assert any("sim-tiny" in line for line in task_result(events, "Show what runs where")["msg"])
    result, events, log = ee_job(base, "teardown", "playbooks/teardown.yml", {})
    assert_successful(result, events, log)
    left = [c.name for node in ("sim-head", "sim-worker1")
            for c in node_docker(node).containers.list(all=True, filters={"label": "dgx_spark.vllm.managed=true"})]
    assert not left, left
    run("ee-sim-down", ["ansible-playbook", "playbooks/sim.yml", "-e", "sim_state=absent"], env=environment())


def test_an_ad_hoc_job_outside_this_project_loads_the_collections_callback(ee, tmp_path):
    """AWX's own callback builds on the one the image names (ORIGINAL_STDOUT_CALLBACK=dgx_spark.vllm.progress): in an
    image without the collection, any job outside this project (an ad hoc command, another project's playbook) died
    with "NoneType takes no arguments". The collection is in the image: a ping of localhost, from a private data
    directory holding nothing of this project, succeeds, and ansible-doc finds the callback by its name."""
    private = tmp_path / "adhoc"
    private.mkdir()
    result = ansible_runner.run(private_data_dir=str(private), host_pattern="localhost", module="ansible.builtin.ping",
                                inventory="localhost ansible_connection=local", quiet=True, timeout=600,
                                process_isolation=True, process_isolation_executable="docker", container_image=EE_IMAGE)
    output = result.stdout.read()
    assert result.status == "successful" and result.rc == 0, output[-3000:]
    assert "NoneType takes no arguments" not in output and "ok: [localhost]" in output, output[-3000:]
    pongs = [e for e in result.events if e.get("event") == "runner_on_ok" and e["event_data"]["res"].get("ping") == "pong"]
    assert len(pongs) == 1, output[-3000:]
    shown = subprocess.run(["docker", "run", "--rm", EE_IMAGE, "ansible-doc", "-t", "callback", "dgx_spark.vllm.progress"],
                           capture_output=True, text=True, check=False)
    assert shown.returncode == 0 and "dgx_spark.vllm.progress" in shown.stdout, shown.stderr[-2000:]
