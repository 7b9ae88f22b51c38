"""Shared helpers of the unit tests: fixture paths and trees rebuilt from captures."""

import os

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def fixture(*parts):
    return os.path.join(FIXTURES, *parts)


def read_fixture(*parts):
    with open(fixture(*parts), encoding="utf-8") as handle:
        return handle.read()


def build_sysfs(capture_name, root):
    """Rebuild a sysfs tree under ``root`` from a ``grep -r .`` capture.

    ``path:value`` lines become files; ``grep: path: Invalid argument`` lines (attributes the kernel
    refuses to read, such as the type of an empty GID slot) become directories, so reading them raises
    an OSError exactly where the kernel raised EINVAL.
    """
    for line in read_fixture("sysfs", capture_name).splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith("grep: "):
            path = line[len("grep: "):].rsplit(": ", 1)[0]
            os.makedirs(os.path.join(root, path), exist_ok=True)
            continue
        path, dummy, value = line.partition(":")
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as handle:
            handle.write(value + "\n")
    return str(root)


def build_proc(root, meminfo_name, processes=()):
    """A proc tree: ``meminfo`` from a capture and one ``<pid>/status`` per (pid, name, ppid, rss_kib)."""
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "meminfo"), "w", encoding="utf-8") as handle:
        handle.write(read_fixture("meminfo", meminfo_name))
    for pid, name, ppid, rss_kib in processes:
        os.makedirs(os.path.join(root, str(pid)), exist_ok=True)
        with open(os.path.join(root, str(pid), "status"), "w", encoding="utf-8") as handle:
            handle.write("Name:\t%s\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t%d\nPid:\t%d\nPPid:\t%d\n"
                         "VmRSS:\t%8d kB\nRssAnon:\t%8d kB\nRssFile:\t%8d kB\nRssShmem:\t       0 kB\n"
                         % (name, pid, pid, ppid, rss_kib, rss_kib * 3 // 4, rss_kib // 4))
    return str(root)
