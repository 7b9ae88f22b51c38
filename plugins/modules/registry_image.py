#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: registry_image
short_description: Ask a registry whether this node can pull an image, or pull it, the login kept out of argv
version_added: 1.0.0
description:
  - With C(image_source=pull) every node fetches the plan's image from its registry instead of the head streaming
    it. A pull that fails midway through an apply leaves the cluster half changed, and its causes are the node's own
    (the registry's CA not trusted there, no login or a wrong one, a name the registry lacks, an address it cannot reach).
  - O(state=checked) asks the registry for the image's manifest from the node, as C(docker pull) would ask it (the
    system's CAs and C(/etc/docker/certs.d/<registry>/*.crt), a Basic or a Bearer login), and returns RV(problem) with
    the fix, or nothing; it changes nothing. A node that holds the image asks nothing.
  - O(state=present) pulls the image where the node lacks it, through the Docker daemon's API on its socket as
    C(docker pull) asks it, the login in the request's C(X-Registry-Auth) header, never in argv, the environment, a
    file or the user's C(~/.docker). The daemon's own mirrors, proxy and insecure registries apply to the pull; the
    check (O(state=checked)) goes from the node straight to the registry, with the SSH user's proxy settings.
  - Send a login only to the registry it is for; the image role passes it only for images of that registry.
  - Runs as the SSH user, who runs C(docker) on the node (the image role's other steps do too); the daemon's socket is
    C(DOCKER_HOST)'s when that names a unix socket, else C(/var/run/docker.sock).
author:
  - dgx_spark.vllm developers (@dgx-spark)
extends_documentation_fragment:
  - dgx_spark.vllm.attributes
  - dgx_spark.vllm.attributes.ACTIONGROUP_VLLM
attributes:
  check_mode:
    support: full
    details:
      - O(state=checked) asks the registry in check mode too; O(state=present) says whether it would pull.
  diff_mode:
    support: none
options:
  image:
    description: The image, as C(docker pull) takes it (C(registry/repository:tag) or C(@sha256:...)).
    type: str
    required: true
  state:
    description: C(checked) asks the registry and changes nothing; C(present) pulls the image where the node lacks it.
    type: str
    choices: [checked, present]
    default: checked
  username:
    description: The registry login's user (image_registry_username); none for a registry that asks no login.
    type: str
  password:
    description: The registry login's password or token (image_registry_password).
    type: str
  certs_dir:
    description: Where Docker reads each registry's CAs (C(<certs_dir>/<registry>/*.crt)).
    type: path
    default: /etc/docker/certs.d
  timeout:
    description: Seconds each request to the registry may take.
    type: int
    default: 30
  pull_timeout:
    description: Seconds the pull may take.
    type: int
    default: 3600
"""

EXAMPLES = r"""
- name: Ask the registry, before any change
  dgx_spark.vllm.registry_image:
    image: registry.example.internal:5000/vllm/vllm-ray:26.05
    username: "{{ image_registry_username }}"
    password: "{{ image_registry_password }}"
  register: asked

- name: Pull it
  dgx_spark.vllm.registry_image:
    image: registry.example.internal:5000/vllm/vllm-ray:26.05
    state: present
    username: "{{ image_registry_username }}"
    password: "{{ image_registry_password }}"
  when: not asked.present and not asked.problem
"""

RETURN = r"""
present:
  description: Whether the node held the image before this call.
  returned: always
  type: bool
image_id:
  description: The image's ID on the node once it holds it; empty while it does not.
  returned: always
  type: str
digest:
  description: The digest the registry gave for the image's manifest (O(state=checked) on a node lacking it).
  returned: when asked
  type: str
problem:
  description: Why the node cannot pull the image, with the fix; empty when it can.
  returned: always
  type: str
  sample: >-
    its certificate is not trusted on this node (unable to get local issuer certificate). Docker trusts the system's
    CAs and the *.crt files in /etc/docker/certs.d/10.209.0.6:5000/ (none there). Fix: place the registry's CA there
    as ca.crt, as docker pull reads it
pulled:
  description: The daemon's last word on the pull (that the image was downloaded, or is up to date).
  returned: when pulled
  type: str
  sample: "Status: Downloaded newer image for 10.209.0.6:5000/dgx-spark-sim/runtime:sim"
kind:
  description: What kind of problem (tls, login, denied, missing, unreachable, answer); empty when none.
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import registry, registry_pull
from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe.node_probe import image_id


def main():
    module = AnsibleModule(
        argument_spec=dict(image=dict(type="str", required=True), state=dict(type="str", default="checked", choices=["checked", "present"]),
                           username=dict(type="str"), password=dict(type="str", no_log=True),
                           certs_dir=dict(type="path", default=registry.CERTS_DIR), timeout=dict(type="int", default=30),
                           pull_timeout=dict(type="int", default=3600)),
        required_by={"username": "password"},
        supports_check_mode=True,
    )
    params = module.params
    held = image_id(module.run_command, params["image"]) or ""
    result = dict(changed=False, present=bool(held), image_id=held, problem="", kind="")
    if held:
        module.exit_json(**result)
    if params["state"] == "checked":
        try:
            result.update(registry.check(params["image"], params["username"], params["password"], params["certs_dir"], params["timeout"]))
        except registry.Answer as answer:
            result.update(kind=answer.kind, problem="its registry %s: %s" % (registry.reference(params["image"])["registry"], answer.problem))
        module.exit_json(**result)
    result["changed"] = True
    if module.check_mode:
        module.exit_json(**result)
    ok, said = registry_pull.pull(params["image"], params["username"], params["password"], registry_pull.daemon_socket(os.environ),
                                  params["pull_timeout"])
    if not ok:
        module.fail_json(msg="The pull of %s failed: %s. Check the node's disk (docker system df) and its daemon's log"
                         % (params["image"], said[-2000:]), **result)
    result.update(image_id=image_id(module.run_command, params["image"]) or "", pulled=said)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
