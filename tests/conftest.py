"""Make the checkout importable as ansible_collections.dgx_spark.vllm for every test layer."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, ".collections")
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)
