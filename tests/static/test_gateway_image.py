"""The gateway's image installs only what its lock names, with the hashes of every file, on a Spark's head and on the
simulated one alike (roles/gateway/files)."""

import os
import re

from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import gateway

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FILES = os.path.join(ROOT, "roles", "gateway", "files")
INSTALL = "pip install --no-cache-dir --disable-pip-version-check --require-hashes --no-deps"


def read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as handle:
        return handle.read()


def test_the_lock_pins_every_package_with_hashes_and_litellm_at_the_checked_version():
    text = read("roles", "gateway", "files", "requirements.txt")
    entries = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n\n", 1)[-1] if text.startswith("#") else text)
    pinned = [e for e in entries if re.match(r"^[A-Za-z0-9][A-Za-z0-9._\[\],-]*==", e)]
    assert len(pinned) > 50, "the lock lists LiteLLM's proxy and its dependencies"
    for entry in pinned:
        assert "--hash=sha256:" in entry, entry.splitlines()[0]
    assert any(e.startswith("litellm[proxy]==%s " % gateway.LITELLM_VERSION) for e in pinned)
    assert not re.search(r"(?m)^-(-index-url|-extra-index-url|-find-links|i |f )", text)  # no index of this machine's


def test_the_spark_and_the_simulated_head_install_the_same_lock_the_same_way():
    spark = read("roles", "gateway", "files", "Dockerfile")
    sim = read("roles", "sim_cluster", "templates", "litellm.Dockerfile.j2")
    for recipe in (spark, sim):
        assert "COPY requirements.txt /opt/litellm-requirements.txt" in recipe
        assert INSTALL in recipe and "-r /opt/litellm-requirements.txt" in recipe
        assert "litellm[proxy]" not in recipe.split("RUN", 1)[1]  # nothing named beside the lock
    assert "ARG BASE_IMAGE=debian:12-slim\nFROM ${BASE_IMAGE}" in spark  # the base's digest is a build argument
    assert "roles/gateway/files/requirements.txt" in read("roles", "sim_cluster", "defaults", "main.yml").replace(
        "{{ role_path }}/../gateway/files/requirements.txt", "roles/gateway/files/requirements.txt")
