# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Print the endpoint serve.yml brought up and one real chat completion from it.

Reads the endpoint and model from <inventory>/.artifacts/summary.json and the API key from
<inventory>/.secrets/vllm_api_key (never printed).

Usage: scripts/ask.py [--inventory inventories/sim] [--prompt TEXT] [--max-tokens N]
"""

import argparse
import json
import os
import sys
import time
import urllib.request


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", default="inventories/sim")
    parser.add_argument("--prompt", default="Hello! Who are you?")
    parser.add_argument("--max-tokens", type=int, default=24)
    args = parser.parse_args()
    summary_path = os.path.join(args.inventory, ".artifacts", "summary.json")
    try:
        with open(summary_path, encoding="utf-8") as handle:
            summary = json.load(handle)
        with open(os.path.join(args.inventory, ".secrets", "vllm_api_key"), encoding="utf-8") as handle:
            key = handle.read().strip()
    except OSError as exc:
        sys.exit("ask: %s; run playbooks/serve.yml first" % exc)
    endpoint, model = summary["endpoint"], summary["model"]
    body = {"model": model, "messages": [{"role": "user", "content": args.prompt}], "max_tokens": args.max_tokens}
    request = urllib.request.Request(endpoint.rstrip("/") + "/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            answer = json.load(response)
    except OSError as exc:
        sys.exit("ask: %s does not answer (%s); is the cluster up? (make sim)" % (endpoint, getattr(exc, "reason", exc)))
    seconds = time.monotonic() - started
    print("Endpoint: %s  (model %s, %s, %s)" % (endpoint, model, summary.get("parallelism", ""), summary.get("backend", "")))
    print("API key:  in %s" % os.path.join(args.inventory, ".secrets", "vllm_api_key"))
    print("Prompt:   %s" % args.prompt)
    print("Answer:   %r" % answer["choices"][0]["message"]["content"])
    usage, finish = answer["usage"], answer["choices"][0]["finish_reason"]
    print("          %d tokens in %.2f s (finish_reason %s)" % (usage["completion_tokens"], seconds, finish))


if __name__ == "__main__":
    main()
