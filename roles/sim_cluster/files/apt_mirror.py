# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Print the Debian mirror this host's apt sources use for SUITE, as JSON {"mirror": URI}.

Reads one-line sources (/etc/apt/sources.list, sources.list.d/*.list) and deb822 sources
(sources.list.d/*.sources); takes the first "deb" entry whose suites include SUITE exactly and whose
components include "main". Exits 1 with a message when there is none.

Usage: apt_mirror.py SUITE [APT_DIR]
"""

import glob
import json
import os
import re
import sys


def one_line_entries(text):
    for line in text.splitlines():
        words = re.sub(r"\[[^\]]*\]", " ", line.split("#", 1)[0]).split()
        if len(words) >= 4 and words[0] == "deb":
            yield words[1], [words[2]], words[3:]


def deb822_entries(text):
    for stanza in text.split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line:
                continue
            key, value = line.split(":", 1)
            fields[key.strip().lower()] = value.split()
        if "deb" not in fields.get("types", []) or fields.get("enabled", ["yes"])[0] == "no":
            continue
        for uri in fields.get("uris", []):
            yield uri, fields.get("suites", []), fields.get("components", [])


def main(suite, apt_dir="/etc/apt"):
    sources = []
    for path in [os.path.join(apt_dir, "sources.list")] + sorted(glob.glob(os.path.join(apt_dir, "sources.list.d", "*"))):
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except OSError:
            continue
        entries = deb822_entries(text) if path.endswith(".sources") else one_line_entries(text)
        sources.extend(entries)
    for uri, suites, components in sources:
        if suite in suites and "main" in components:
            print(json.dumps({"mirror": uri.rstrip("/")}))
            return 0
    sys.stderr.write("no Debian mirror for suite %s with component main in %s/sources.list or sources.list.d; "
                     "set sim_cluster_debian_mirror\n" % (suite, apt_dir))
    return 1


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
