# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Three small patches that let vLLM's CPU build run the DGX Spark way (Ray across nodes, one rank per
node) inside the simulated cluster's runtime image, and only there.

1. vllm/platforms/cpu.py, class CpuPlatform: ``ray_device_key = "GPU"``. Each simulated node's Ray
   advertises one GPU, as a Spark does; without the key vLLM refuses Ray on CPU.
2. vllm/v1/worker/cpu_worker.py: suffix ``VLLM_DIST_IDENT`` with the node's VLLM_HOST_IP, so ranks
   on different nodes do not try to share one shared-memory segment
   ("open shm in SHMManager failed. errno: 2").
3. vllm/v1/worker/cpu_worker.py, CPUWorker.__init__: a rank claims its pool of the node's simulated GB10 memory
   (dgx_spark_sim_gb10.hold: utilization x 119.67 GiB, held while the rank lives), as a rank on a Spark does.

Each patch matches exact source lines; the build fails when they are not found exactly once.
"""

import os
import sys

import vllm

ROOT = os.path.dirname(vllm.__file__)
PATCHES = [
    ("platforms/cpu.py",
     "    device_control_env_var = DEVICE_CONTROL_ENV_VAR\n",
     "    device_control_env_var = DEVICE_CONTROL_ENV_VAR\n"
     "    ray_device_key: str = \"GPU\"  # dgx_spark.vllm simulated cluster\n"),
    ("v1/worker/cpu_worker.py",
     "            else init_method.split(\":\")[-1]\n        )\n",
     "            else init_method.split(\":\")[-1]\n"
     "        ) + \"-\" + os.environ.get(\"VLLM_HOST_IP\", os.uname().nodename)  # dgx_spark.vllm simulated cluster\n"),
    ("v1/worker/cpu_worker.py",
     "        self.parallel_config.disable_custom_all_reduce = True\n",
     "        self.parallel_config.disable_custom_all_reduce = True\n"
     "        __import__(\"dgx_spark_sim_gb10\").hold(vllm_config)  # dgx_spark.vllm simulated cluster\n"),
]


def main():
    for relative, old, new in PATCHES:
        path = os.path.join(ROOT, relative)
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        count = text.count(old)
        if count != 1:
            sys.exit("patch of %s: expected the source lines exactly once, found %d; this vLLM release "
                     "needs new patches:\n%s" % (path, count, old))
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text.replace(old, new))
        print("patched %s" % path)


if __name__ == "__main__":
    main()
