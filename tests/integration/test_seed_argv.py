"""Every seed profile's vllm serve command, and each deviation's restored one, parses with vLLM's own argument parser
(vLLM 0.32 in the simulation's runtime image): flags that exist, values their parsers take (the JSON of
--compilation-config and --speculative-config included)."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import seed_tables  # noqa: E402  pylint: disable=wrong-import-position

IMAGE = "dgx-spark-sim/runtime:sim"


def test_seed_commands_parse_with_the_images_vllm():
    argvs = {}
    for name in seed_tables.seed_names():
        dummy, plan, restored = seed_tables.plans(seed_tables.load_seed(name))
        argvs[name] = plan["cluster"]["vllm_argv"]
        for what, other in restored.items():
            argvs["%s, restored %s" % (name, what)] = other["cluster"]["vllm_argv"]
    script = os.path.join(ROOT, "tests", "integration", "parse_argv.py")
    done = subprocess.run(["docker", "run", "--rm", "-i", "--network", "none", "-v", "%s:/parse_argv.py:ro" % script,
                           "--entrypoint", "python3", IMAGE, "/parse_argv.py"], input=json.dumps(argvs), text=True,
                          capture_output=True, timeout=300, check=False)
    results = {r["name"]: r for r in (json.loads(line) for line in done.stdout.splitlines() if line.startswith("{"))}
    assert set(results) == set(argvs), done.stderr[-2000:]
    assert [r for r in results.values() if not r["ok"]] == []
    assert results["minimax_m27_mxfp4"]["served"] == ["minimax-m2.7"]
    assert results["minimax_m27_mxfp4"]["util"] == 0.82 and results["minimax_m27_mxfp4"]["max_model_len"] == 131072
    assert results["minimax_m27_nvfp4_gb10"]["cudagraph_mode"].endswith("NONE")
    assert results["minimax_m3_nvfp4_tp3"]["tp"] == 3
    assert results["minimax_m3_nvfp4_tp3, restored --gpu-memory-utilization"]["util"] == 0.9
    assert results["nemotron3_super_nvfp4"]["max_model_len"] == 1048576
