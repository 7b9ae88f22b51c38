# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one way modules of this collection run external commands: an argv list, never a shell
string, in the C locale so that parsers see the output they were written against."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile

C_LOCALE = {"LC_ALL": "C", "LANG": "C", "LANGUAGE": "C"}


def run(module, argv, data=None, environ_update=None):
    """Run ``argv`` through ``module.run_command``; return (rc, stdout, stderr)."""
    environ = dict(C_LOCALE)
    environ.update(environ_update or {})
    return module.run_command([str(arg) for arg in argv], data=data, environ_update=environ)


def systemd_runs(marker="/run/systemd/system"):
    """Whether systemd is this host's init: the folder exists only then (sd_booted(3)). A node without it (a container
    init, an older simulation) is told apart by the callers, which then do by hand what systemd would."""
    return os.path.isdir(marker)


def read_text(path):
    """A file's text, or None when it cannot be read (absent, a folder, not readable)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return None


RECORD_BYTES = 1 << 20


def open_regular(path):
    """``path`` opened for reading when it is a regular file, else None: never through a link, and a device or a FIFO
    is never opened (a container that can write a folder can also make a device node there, and opening some, such
    as a watchdog, acts). Looked at first without opening it (O_PATH), then opened again through that same file."""
    try:
        looked = os.open(path, os.O_PATH | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(looked).st_mode):
            return None
        return os.fdopen(os.open("/proc/self/fd/%d" % looked, os.O_RDONLY), "rb")
    except OSError:
        return None
    finally:
        os.close(looked)


def create(path, mode=0o640):
    """``path`` made anew for writing, never through a link: what was there (a file, or a link planted in its place) is
    removed by name first."""
    if os.path.lexists(path):
        os.unlink(path)
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode), "wb")


def read_small(path, limit=RECORD_BYTES):
    """A small regular file's text, never through a link (what containers write is read as data, with care), or None
    when it is absent, not a regular file, larger than ``limit`` or unreadable."""
    handle = open_regular(path)
    if handle is None:
        return None
    with handle:
        try:
            if os.fstat(handle.fileno()).st_size <= limit:
                return handle.read(limit).decode("utf-8")
        except (OSError, ValueError):
            pass
    return None


COPY_BYTES = 256 << 20


def copy_regular(source, dest, chunk=1 << 20, limit=COPY_BYTES):
    """Copy ``source`` to ``dest`` when it is a regular file (open_regular), its last ``limit`` bytes at most, into a
    file made anew (create): a folder containers write is theirs to fill with links, devices or a sparse file of any
    size. Returns whether it was copied."""
    handle = open_regular(source)
    if handle is None:
        return False
    with handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            handle.seek(size - limit)
        with create(dest) as out:
            left = limit
            for block in iter(lambda: handle.read(min(chunk, left)), b""):
                out.write(block)
                left -= len(block)
                if left <= 0:
                    break
    return True


def sudo_caller(environ=None):
    """The (uid, gid) of the user who ran this module through sudo (Ansible's become from a non-root SSH user, as on
    DGX OS), or None when it runs as that user itself or was not started through sudo."""
    environ = os.environ if environ is None else environ
    uid, gid = environ.get("SUDO_UID", ""), environ.get("SUDO_GID", "")
    if os.geteuid() != 0 or not uid.isdigit() or not gid.isdigit() or int(uid) == 0:
        return None
    return int(uid), int(gid)


def ssh_session(environ=None, start=None, proc="/proc", hops=16):
    """SSH_CONNECTION of the session this module runs in: its own environment's, or, when it runs through sudo (whose
    env_reset drops it: a non-root SSH user's become, as on DGX OS), that of its nearest ancestor process that has it,
    the shell sshd started for the SSH user (root reads any process's environ). None for a local connection."""
    environ = os.environ if environ is None else environ
    if environ.get("SSH_CONNECTION"):
        return environ["SSH_CONNECTION"]
    pid = os.getppid() if start is None else start
    for dummy in range(hops):
        if pid <= 1:
            return None
        try:
            with open("%s/%d/environ" % (proc, pid), "rb") as handle:
                for entry in handle.read().split(b"\0"):
                    if entry.startswith(b"SSH_CONNECTION="):
                        return entry.split(b"=", 1)[1].decode("ascii", "replace")
            with open("%s/%d/stat" % (proc, pid), encoding="ascii", errors="replace") as handle:
                pid = int(handle.read().rsplit(")", 1)[1].split()[1])  # "pid (comm) state ppid ..."
        except (OSError, ValueError, IndexError):
            return None
    return None


def stage_for(caller, paths, prefix="dgx-spark-"):
    """Copies of ``paths`` (regular files, copy_regular) in a new folder that ``caller`` (sudo_caller's (uid, gid))
    alone owns, so that the SSH connection, which transfers files as that user and never through sudo, can copy to the
    controller what root keeps out of its reach. A copy holds a file's last COPY_BYTES at most. Returns (the folder,
    {path: its copy}); the caller removes the folder. On an error the folder is removed and the error raised."""
    folder = tempfile.mkdtemp(prefix=prefix)
    staged = {}
    try:
        for path in paths:
            copy = os.path.join(folder, os.path.basename(path))
            if copy_regular(path, copy):
                os.chown(copy, *caller)
                os.chmod(copy, 0o600)
                staged[path] = copy
        os.chown(folder, *caller)
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder, staged


def read_record(path):
    """One of the collection's small JSON records on a node (read_small), or None when it is absent, unreadable or
    not a mapping."""
    text = read_small(path)
    try:
        data = json.loads(text) if text is not None else None
    except ValueError:
        data = None
    return data if isinstance(data, dict) else None


def json_text(data):
    """A JSON file's text as the collection writes it, on a node (the head's record and references) and on the
    controller (the report action), so that the two copies compare as text."""
    return json.dumps(data, indent=4, sort_keys=True, default=str) + "\n"


def start(argv):
    """Start ``argv`` in the background (C locale, no shell) so that a probe reads other facts meanwhile; collect its
    answer with :func:`collect`. Used where a slow read (Ray's state) would otherwise add its seconds to a probe's."""
    environ = dict(os.environ, **C_LOCALE)
    return subprocess.Popen([str(arg) for arg in argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,  # pylint: disable=consider-using-with
                            env=environ, universal_newlines=True)


def collect(proc):
    """(rc, stdout, stderr) of a command started with :func:`start`, once it ends."""
    out, err = proc.communicate()
    return proc.returncode, out, err


def to_file(argv, path):
    """Run ``argv`` with its stdout and stderr, interleaved as they come, written to ``path``; return its rc. For output
    too large to hold (a container's log)."""
    with create(path) as handle:
        return subprocess.call([str(arg) for arg in argv], stdout=handle, stderr=subprocess.STDOUT, env=dict(os.environ, **C_LOCALE))


class Batch:
    """Commands started together, each collected once, and a runner that answers them from there: a probe that knows
    up front what it will ask (docker's every listing, ss, ip, nvidia-smi) pays the slowest of them, not their sum. A
    command not started in the batch (one that depends on another's answer) is run at once by ``run``."""

    def __init__(self, run, argvs):
        self.fallback = run
        self.started = {}
        for argv in argvs:
            key = tuple(str(a) for a in argv)
            if key not in self.started:
                self.started[key] = start(argv)
        self.answers = {}

    def __call__(self, argv):
        key = tuple(str(a) for a in argv)
        if key in self.started:
            if key not in self.answers:
                self.answers[key] = collect(self.started[key])
            return self.answers[key]
        return self.fallback(argv)


def write_text(path, text, mode=0o644, strict_folder=False):
    """Write ``text`` to ``path`` whole or not at all (a reader never sees half a file), making its folder. Everything
    happens in the folder opened once (a descriptor): the temporary file is made anew, never through a link, and given
    its mode on the open file, so whoever can write in that folder cannot turn root's writes elsewhere. With
    ``strict_folder`` (a folder another user owns, node_exporter's), the folder is never made, must not be a link, and
    must not be writable by its group or others; ValueError says why when it is."""
    where, name = os.path.split(path)
    if strict_folder:
        folder = os.open(where, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        if os.fstat(folder).st_mode & 0o022:
            os.close(folder)
            raise ValueError("%s can be written by its group or by others: make it 0755 (chmod go-w %s)" % (where, where))
    else:
        os.makedirs(where, exist_ok=True)
        folder = os.open(where, os.O_RDONLY | os.O_DIRECTORY)
    temp = name + ".tmp"
    try:
        try:
            os.unlink(temp, dir_fd=folder)
        except FileNotFoundError:
            pass
        # Readable by its owner only until it is whole: a secret is never readable by others, not even half-written.
        with os.fdopen(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=folder), "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
        os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
    finally:
        os.close(folder)
