"""Run inside the simulation's runtime image: parse each vllm serve argv with that vLLM's own argument parser and
engine arguments; print one JSON line per argv (its name, and what vLLM made of it, or the error)."""

import json
import sys
import warnings

warnings.filterwarnings("ignore")

from vllm.engine.arg_utils import AsyncEngineArgs  # noqa: E402  pylint: disable=import-error
from vllm.entrypoints.launchers.cli_args import make_arg_parser  # noqa: E402  pylint: disable=import-error
from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: E402  pylint: disable=import-error

for name, argv in json.load(sys.stdin).items():
    parser = make_arg_parser(FlexibleArgumentParser())
    try:
        namespace = parser.parse_args(["--model", argv[2]] + argv[3:])
        engine = AsyncEngineArgs.from_cli_args(namespace)
        print(json.dumps({"name": name, "ok": True, "tp": engine.tensor_parallel_size, "util": engine.gpu_memory_utilization,
                          "max_model_len": engine.max_model_len, "served": namespace.served_model_name,
                          "cudagraph_mode": str((engine.compilation_config or {}).get("cudagraph_mode")
                                                if isinstance(engine.compilation_config, dict)
                                                else getattr(engine.compilation_config, "cudagraph_mode", None))}))
    except SystemExit as exc:  # argparse refused a flag or a value
        print(json.dumps({"name": name, "ok": False, "error": "argparse exit %s" % exc}))
    except (ValueError, TypeError, KeyError, AssertionError) as exc:  # a config's validator refused a value
        print(json.dumps({"name": name, "ok": False, "error": "%s: %s" % (type(exc).__name__, exc)}))
