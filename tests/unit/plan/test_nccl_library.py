"""vllm_nccl_library (module_utils/plan/nccl_library.py): the plan shows the image's NCCL and each node's system NCCL,
warns when they are two builds of one version (vllm-project/vllm#41725), and ``system`` mounts each node's library
over the image's file with VLLM_NCCL_SO_PATH naming it; what cannot work is refused before anything changes. The
identities are read from real libraries: two builds of the simulation's stand-in, compiled as its images compile
them."""

import os
import subprocess

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import deployment, profiles
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import nccl_lib
from ansible_collections.dgx_spark.vllm.plugins.module_utils.report import render

from helpers import ROOT, spark_inputs

WHEEL = "/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2"
SYSTEM = "/usr/lib/aarch64-linux-gnu/libnccl.so.2.28.9"


def identity(tmp_path, build, shown_as, version="2.28.9"):
    source = open(os.path.join(ROOT, "roles", "sim_cluster", "files", "nccl_standin.c")).read().replace("2.28.9", version)
    (tmp_path / "nccl.c").write_text(source)
    out = str(tmp_path / ("lib-%s-%s.so" % (build.replace(" ", "_"), version)))
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,--build-id=sha1", "-DNCCL_STANDIN_BUILD=\"%s\"" % build, "-o", out,
                    str(tmp_path / "nccl.c")], check=True)
    found = nccl_lib.nccl_identity(out)
    return dict(found, path=shown_as, file=shown_as)  # as the node or the image names it


def plan(tmp_path, mode=None, image=True, systems=("DGX OS libnccl2", "DGX OS libnccl2"), versions=("2.28.9", "2.28.9")):
    m25 = profiles.load(profiles.find("minimax_m25_nvfp4_ep", [os.path.join(ROOT, "profiles")]))
    m25["model"]["revision"] = "0123456789abcdef0123456789abcdef01234567"
    inputs = spark_inputs(m25, tmp_path, settings={"nccl_library": mode} if mode else None)
    inputs["image_info"] = dict(inputs["image_info"], nccl=dict(identity(tmp_path, "pip wheel", WHEEL), loaded=True) if image else None)
    for (name, node), build, version in zip(sorted(inputs["nodes"].items()), systems, versions):
        node["system_nccl"] = identity(tmp_path, build, SYSTEM.replace("2.28.9", version), version) if build else None
    return deployment.plan_deployment(inputs)


def messages(items):
    return " | ".join(e["message"] if isinstance(e, dict) else e for e in items)


def test_the_plan_shows_both_libraries_and_warns_of_two_builds_of_one_version(tmp_path):
    done = plan(tmp_path)
    assert done["ok"], done["errors"]
    section = done["cluster"]["nccl_library"]
    assert section["mode"] == "image" and section["volumes"] == {} and "VLLM_NCCL_SO_PATH" not in done["nodes"]["spark1"]["env"]
    assert section["image"]["build_id"] != section["system"]["spark1"]["build_id"]
    text = messages(done["warnings"])
    assert "same version in different builds" in text and "spark1, spark2" in text and "vllm_nccl_library: system" in text
    shown = "\n".join(render.deployment(done))
    line = [l for l in shown.splitlines() if l.startswith("NCCL library")][0]
    assert "image (vllm_nccl_library)" in line and WHEEL in line and "spark2's system: 2.28.9+cuda13.0, build" in line


def test_system_mounts_each_nodes_library_over_the_images_file_and_names_it_for_vllm(tmp_path):
    image_plan = plan(tmp_path)
    done = plan(tmp_path, "system")
    assert done["ok"], done["errors"]
    assert "same version in different builds" not in messages(done["warnings"])
    for name in ("spark1", "spark2"):
        spec = done["nodes"][name]["containers"][0]
        assert "%s:%s:ro" % (SYSTEM, WHEEL) in spec["volumes"] and spec["env"]["VLLM_NCCL_SO_PATH"] == WHEEL
        # another library is another deployment: the containers are recreated
        assert done["nodes"][name]["config_hash"] != image_plan["nodes"][name]["config_hash"]


@pytest.mark.parametrize("case, kwargs, host, says", [
    ("a node without one", {"systems": ("DGX OS libnccl2", None)}, "spark2", "spark2 has no system NCCL"),
    ("an image without one", {"image": False}, "all", "the image carries no NCCL of its own"),
    ("versions that differ", {"versions": ("2.28.9", "2.27.3")}, "all", "the nodes' system NCCL differ"),
])
def test_system_is_refused_where_it_cannot_work_naming_the_host_and_the_fix(tmp_path, case, kwargs, host, says):
    done = plan(tmp_path, "system", **kwargs)
    assert not done["ok"], case
    error = [e for e in done["errors"] if says in e["message"]][0]
    assert error["host"] == host and ("vllm_nccl_library: image" in error["message"] or "same libnccl2" in error["message"])


def test_an_unknown_mode_is_refused_with_the_inventory(tmp_path):
    done = plan(tmp_path, "wheel")
    assert [e for e in done["errors"] if "vllm_nccl_library must be image" in e["message"] and e["value"] == "wheel"]


def test_a_system_library_of_another_version_than_the_images_is_warned(tmp_path):
    done = plan(tmp_path, "system", versions=("2.27.3", "2.27.3"))
    assert done["ok"], done["errors"]
    assert "in place of the image's 2.28.9" in messages(done["warnings"])


def test_an_offline_plan_reads_no_library_and_refuses_nothing_for_it(tmp_path):
    m25 = profiles.load(profiles.find("minimax_m25_nvfp4_ep", [os.path.join(ROOT, "profiles")]))
    m25["model"]["revision"] = "0123456789abcdef0123456789abcdef01234567"
    inputs = spark_inputs(m25, tmp_path, settings={"nccl_library": "system", "offline": True})
    for node in inputs["nodes"].values():  # as the inventory gives them: no probe facts
        for fact in ("memory", "roce", "image", "addresses", "resolved"):
            node.pop(fact, None)
    inputs.pop("image_info")
    done = deployment.plan_deployment(inputs)
    assert not [e for e in done["errors"] if "NCCL" in e["message"]], done["errors"]
    assert done["cluster"]["nccl_library"]["lines"][-1] == "not read (offline plan)"


def test_system_warns_of_nodes_with_different_builds_and_a_new_build_recreates_that_nodes_containers(tmp_path):
    same = plan(tmp_path, "system")
    done = plan(tmp_path, "system", systems=("DGX OS libnccl2", "DGX OS libnccl2 rebuilt"))
    assert done["ok"], done["errors"]
    assert "the nodes' system NCCL 2.28.9 are different builds" in messages(done["warnings"])
    assert done["nodes"]["spark1"]["config_hash"] == same["nodes"]["spark1"]["config_hash"]
    assert done["nodes"]["spark2"]["config_hash"] != same["nodes"]["spark2"]["config_hash"]


def test_a_library_whose_version_cannot_be_read_is_refused_under_system(tmp_path):
    m25 = profiles.load(profiles.find("minimax_m25_nvfp4_ep", [os.path.join(ROOT, "profiles")]))
    m25["model"]["revision"] = "0123456789abcdef0123456789abcdef01234567"
    inputs = spark_inputs(m25, tmp_path, settings={"nccl_library": "system"})
    inputs["image_info"] = dict(inputs["image_info"], nccl=dict(identity(tmp_path, "pip wheel", WHEEL), loaded=True))
    for node in inputs["nodes"].values():
        node["system_nccl"] = dict(identity(tmp_path, "DGX OS libnccl2", SYSTEM), version=None)
    done = deployment.plan_deployment(inputs)
    assert [e for e in done["errors"] if "cannot be read" in e["message"] and e["host"] == "spark1" and e["value"] == SYSTEM]
