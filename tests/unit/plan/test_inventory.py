"""plan_inventory: groups, order, fabric IPs, backend, ports, parallel sizes, utilization; no probe facts needed."""

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import inventory
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan.base import Findings, normalize_settings


def inputs(**change):
    base = {"head_hosts": ["s1"], "order": ["s1", "s2"], "backend": "ray", "settings": normalize_settings({}),
            "nodes": {"s1": {"fabric_ip": "192.168.100.10"}, "s2": {"fabric_ip": "192.168.100.11"}},
            "profile": {"name": "p", "parallel": {"tensor": 2, "nodes": 2}}}
    base.update(change)
    return base


def messages(data):
    findings = Findings()
    inventory.check_inventory(data, findings)
    return [e["message"] for e in findings.errors]


def test_head_first_then_workers_in_inventory_order():
    assert inventory.node_order({"spark_head": ["h"], "spark_workers": ["w2", "h", "w1"]}) == (["h"], ["h", "w2", "w1"])


def test_a_good_inventory_passes():
    assert messages(inputs()) == []


@pytest.mark.parametrize("change,expected", [
    ({"head_hosts": ["s1", "s2"]}, "exactly one host in spark_head, found 2 (s1, s2)"),
    ({"nodes": {"s1": {"fabric_ip": "192.168.100.10"}, "s2": {"fabric_ip": "192.168.100.10"}}}, "s1 and s2 have the same spark_fabric_ip"),
    ({"nodes": {"s1": {"fabric_ip": "192.168.100.10"}, "s2": {"fabric_ip": "fe80::1"}}}, "s2: spark_fabric_ip fe80::1 must be IPv4"),
    ({"nodes": {"s1": {"fabric_ip": "192.168.100.10"}, "s2": {}}}, "s2 has no spark_fabric_ip"),
    ({"backend": "slurm"}, "vllm_backend must be ray or mp, got 'slurm'"),
    ({"extra_env": {"RAY_ADDRESS": "ray://10.0.0.1:10001"}}, "is a Ray Client address"),
    ({"settings": normalize_settings({"port": 70000})}, "vllm_port 70000 is not a TCP port"),
    ({"settings": normalize_settings({"nccl_transport": "ib"})}, "vllm_nccl_transport must be auto, roce or socket, got 'ib'"),
    ({"groups": {"spark_cluster": ["s1"], "spark_head": ["s1"], "spark_workers": ["s2"]}}, "s2 in spark_head or spark_workers but not in spark_cluster"),
])
def test_bad_inventory_is_refused_naming_the_value(change, expected):
    assert any(expected in m for m in messages(inputs(**change))), messages(inputs(**change))


def test_parallel_sizes_must_fill_the_gpus():
    findings = Findings()
    sizes = inventory.parallel_sizes(inputs(order=["s1", "s2", "s3"]), findings)
    assert sizes["world_size"] == 2 and sizes["gpus"] == 3
    assert "TP x PP x DP = 2 x 1 x 1 = 2, but the inventory has 3 node(s)" in findings.errors[0]["message"]


def test_utilization_override_and_range():
    findings = Findings()
    assert inventory.utilization(inputs(overrides={"gpu_memory_utilization": "0.5"}), findings) == 0.5
    assert inventory.utilization(inputs(overrides={"gpu_memory_utilization": 1.5}), findings) == 1.5
    assert findings.errors[0]["message"].startswith("gpu_memory_utilization must be in (0, 1], got 1.5")


@pytest.mark.parametrize("change,expected", [
    ({"extra_flags": {"--api-key": "sk-do-not-show"}},
     "vllm_extra_flags carries --api-key, a secret: it would be on vLLM's command line and in plan.json. Give it with vllm_api_key"),
    ({"extra_env": {"HF_TOKEN": "hf_do_not_show"}},
     "vllm_extra_env carries HF_TOKEN, a secret: it would be in every container's environment and in plan.json. Give it with "
     "vllm_hf_token"),
    ({"extra_env": {"WANDB_API_KEY": "x"}}, "vllm_extra_env carries WANDB_API_KEY, a secret"),
    ({"extra_env": {"DB_PASSWORD": "x"}}, "vllm_extra_env carries DB_PASSWORD, a secret"),
    ({"extra_flags": {"--hf-token": "x"}}, "vllm_extra_flags carries --hf-token, a secret"),
    ({"extra_env": {"AWS_ACCESS_KEY_ID": "do-not-show"}}, "vllm_extra_env carries AWS_ACCESS_KEY_ID, a secret"),
    ({"extra_env": {"OPENAI_KEY": "do-not-show"}}, "vllm_extra_env carries OPENAI_KEY, a secret"),
    ({"extra_env": {"GITHUB_PAT": "do-not-show"}}, "vllm_extra_env carries GITHUB_PAT, a secret"),
    ({"extra_env": {"GOOGLE_APPLICATION_CREDENTIALS": "do-not-show"}}, "vllm_extra_env carries GOOGLE_APPLICATION_CREDENTIALS"),
    ({"profile": {"name": "p", "parallel": {"tensor": 2, "nodes": 2}, "env": {"ANTHROPIC_API_KEY": "do-not-show"}}},
     "profile p: env carries ANTHROPIC_API_KEY, a secret: it would be in every container's environment"),
    ({"profile": {"name": "p", "parallel": {"tensor": 2, "nodes": 2}, "vllm": {"flags": {"--api-key": "do-not-show"}}}},
     "profile p: vllm.flags carries --api-key, a secret: it would be on vLLM's command line and in plan.json. Give it with vllm_api_key"),
])
def test_secrets_in_extra_flags_or_env_are_refused_by_name_never_by_value(change, expected):
    found = messages(inputs(**change))
    assert len(found) == 1 and found[0].startswith(expected) and found[0].endswith("nothing was changed")
    assert "do-not-show" not in str(found) and "do_not_show" not in str(found)


def test_names_that_only_look_like_secrets_pass():
    assert messages(inputs(extra_env={"TOKENIZERS_PARALLELISM": "false", "NCCL_DEBUG": "INFO", "KEYRING_BACKEND": "none"},
                           extra_flags={"--max-num-batched-tokens": 8192, "--ssl-keyfile": "/tls/key.pem",
                                        "--enable-prompt-tokens-details": True})) == []


def test_pipeline_parallelism_across_nodes_is_refused_with_ray_unless_accepted():
    """Seed 003: PP=2 across two Sparks with Ray crashed on the second request."""
    profile = {"name": "p", "parallel": {"tensor": 1, "pipeline": 2, "nodes": 2}}

    def sized(**change):
        findings = Findings()
        sizes = inventory.parallel_sizes(inputs(profile=profile, **change), findings)
        return sizes, [e["message"] for e in findings.errors], findings.warnings

    sizes, errors, warnings = sized()
    assert sizes["pipeline_parallel_size"] == 2 and len(errors) == 1 and warnings == []
    assert "PP=2 spans the nodes with Ray" in errors[0] and "Ray channel crash on 2nd" in errors[0]
    assert "vllm_pipeline_across_nodes: true" in errors[0]
    for change in ({"settings": normalize_settings({"pipeline_across_nodes": True})}, {"backend": "mp"}):
        sizes, errors, warnings = sized(**change)
        assert errors == [] and len(warnings) == 1 and "Ray channel crash on 2nd" in warnings[0]
    findings = Findings()
    inventory.parallel_sizes(inputs(), findings)
    assert findings.errors == [] and findings.warnings == []


@pytest.mark.parametrize("volume,source,reached", [
    ("/var/lib/dgx-spark-vllm:/state", "/var/lib/dgx-spark-vllm", "the state folder"),
    ("/var/lib/dgx-spark-vllm/dgx-spark/boot:/boot", "/var/lib/dgx-spark-vllm/dgx-spark/boot", "the state folder"),
    ("/var/lib:/x:ro", "/var/lib", "the state folder"),
    ("/:/host", "/", "the container runtime's socket"),
    ("/var/run/docker.sock:/var/run/docker.sock", "/var/run/docker.sock", "the container runtime's socket"),
    ("/run/:/hostrun", "/run", "the container runtime's socket"),
    ("/srv/s2/state/../state:/s", "/srv/s2/state", "the state folder"),
    ("//var/run/docker.sock:/s", "/var/run/docker.sock", "the container runtime's socket"),
    ("///var//lib/dgx-spark-vllm/:/x", "/var/lib/dgx-spark-vllm", "the state folder"),
    ("/run/containerd:/c", "/run/containerd", "the container runtime's socket"),
    ("/var/lib/docker/volumes:/v", "/var/lib/docker/volumes", "Docker's own data"),
])
def test_an_extra_volume_that_reaches_what_root_runs_is_refused(volume, source, reached):
    profile = {"name": "p", "parallel": {"tensor": 2, "nodes": 2}, "container": {"extra_volumes": [volume]}}
    settings = normalize_settings({"state_dir": "/srv/{node}/state"} if volume.startswith("/srv") else {})
    found = messages(inputs(profile=profile, settings=settings))
    assert len(found) == 1 and "profile p: container.extra_volumes mounts %s, which reaches %s" % (source, reached) in found[0], found


def test_other_extra_volumes_pass():
    profile = {"name": "p", "parallel": {"tensor": 2, "nodes": 2}, "container": {"extra_volumes": [
        "/opt/cache:/root/.cache", "/var/lib/dgx-spark-vllm-other:/x", "hf-cache:/root/.cache/huggingface", "/etc/localtime:/etc/localtime:ro"]}}
    assert messages(inputs(profile=profile)) == []


@pytest.mark.parametrize("models", ["/var/lib/dgx-spark-vllm", "/var/lib/dgx-spark-vllm/dgx-spark/models", "/var/lib/dgx-spark-vllm/models"])
def test_a_models_folder_that_overlaps_the_state_folder_is_refused(models):
    """The fetch mounts the models folder read-write: where it holds the state folder (or the cluster is named
    models, as the default models folder), a container would reach what root runs."""
    cluster = "models" if models.endswith("/models") and "dgx-spark/" not in models else "dgx-spark"
    found = messages(inputs(settings=normalize_settings({"models_dir": models, "cluster_name": cluster})))
    assert found and all("the models folder %s overlaps the state folder /var/lib/dgx-spark-vllm/%s" % (models, cluster) in m for m in found), found
