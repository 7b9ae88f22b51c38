"""probe/nccl_lib.py: a NCCL library's version and GNU build ID, read without loading it, on real ELF files (two builds
of the simulation's stand-in, compiled here as the images compile them, and this machine's libc), checked against
readelf."""

import os
import re
import subprocess

from ansible_collections.dgx_spark.vllm.plugins.module_utils.probe import image_info, nccl_lib

from helpers import ROOT

STANDIN = os.path.join(ROOT, "roles", "sim_cluster", "files", "nccl_standin.c")


def build(tmp_path, name, build):
    out = str(tmp_path / name)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-Wl,--build-id=sha1", "-Wl,-soname,libnccl.so.2",
                    "-DNCCL_STANDIN_BUILD=\"%s\"" % build, "-o", out, STANDIN], check=True)
    return out


def readelf_build_id(path):
    text = subprocess.run(["readelf", "-n", path], check=True, capture_output=True, text=True).stdout
    return re.search(r"Build ID: ([0-9a-f]+)", text).group(1)


def test_two_builds_of_one_version_are_told_apart_by_their_build_id(tmp_path):
    wheel = nccl_lib.nccl_identity(build(tmp_path, "wheel.so", "pip wheel nvidia-nccl-cu13"))
    system = nccl_lib.nccl_identity(build(tmp_path, "system.so", "DGX OS libnccl2"))
    assert wheel["version"] == system["version"] == "2.28.9" and wheel["build"] == "+cuda13.0"
    assert wheel["build_id"] == readelf_build_id(wheel["file"]) and system["build_id"] == readelf_build_id(system["file"])
    assert wheel["build_id"] != system["build_id"]
    assert nccl_lib.short(wheel) == "2.28.9+cuda13.0, build %s" % wheel["build_id"][:12]


def test_a_package_link_resolves_and_its_file_name_gives_the_version_without_a_banner(tmp_path):
    libc = "/lib/x86_64-linux-gnu/libc.so.6" if os.path.exists("/lib/x86_64-linux-gnu/libc.so.6") else "/lib/aarch64-linux-gnu/libc.so.6"
    found = nccl_lib.nccl_identity(libc)
    assert found["build_id"] == readelf_build_id(libc) and found["version"] is None
    target = tmp_path / "libnccl.so.2.27.3"
    target.write_bytes(open(libc, "rb").read())
    (tmp_path / "libnccl.so.2").symlink_to("libnccl.so.2.27.3")
    found = nccl_lib.nccl_identity(str(tmp_path / "libnccl.so.2"))
    assert found["file"] == str(target) and found["version"] == "2.27.3" and found["build_id"] == readelf_build_id(libc)


def test_the_system_read_takes_the_first_library_found_and_none_without(tmp_path):
    build(tmp_path, "libnccl.so.2", "DGX OS libnccl2")
    assert nccl_lib.system((str(tmp_path / "nowhere" / "libnccl.so.2"),)) is None
    assert nccl_lib.system((str(tmp_path / "*.so.2"),))["version"] == "2.28.9"
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "libnccl.so.2").write_bytes(b"")
    said = []
    assert nccl_lib.system((str(tmp_path / "empty" / "libnccl.so.2"),), warn=said.append) is None and "cannot read" in said[0]


def test_the_image_script_carries_the_reader_and_reports_the_wheel_library(tmp_path):
    # The script as the image runs it, in a Python whose "nvidia.nccl" package holds a stand-in: the wheel's library
    # is reported, not loaded (a CPU torch maps none).
    package = tmp_path / "site" / "nvidia" / "nccl" / "lib"
    package.mkdir(parents=True)
    build(tmp_path, "site/nvidia/nccl/lib/libnccl.so.2", "pip wheel nvidia-nccl-cu13")
    script = image_info.PROBE_SCRIPT
    assert nccl_lib.SOURCE in script and script.index("def image_nccl") < script.index('result["nccl"] = image_nccl()')
    done = subprocess.run(["python3", "-c", script], capture_output=True, text=True, check=True, env=dict(os.environ, PYTHONPATH=str(tmp_path / "site")))
    import json
    found = json.loads(done.stdout.strip().splitlines()[-1])["nccl"]
    assert found["file"] == str(package / "libnccl.so.2") and found["version"] == "2.28.9" and found["loaded"] is False
    assert found["build_id"] == readelf_build_id(found["file"])


def test_what_is_no_library_is_refused_at_once_never_read_or_waited_on(tmp_path):
    good = build(tmp_path, "good.so", "pip wheel nvidia-nccl-cu13")
    data = open(good, "rb").read()
    (tmp_path / "cut.so").write_bytes(data[:100])  # the headers point past its end
    os.mkfifo(str(tmp_path / "fifo.so"))  # opening a FIFO for reading would wait for a writer
    (tmp_path / "tiny.so").write_bytes(b"\x7fELF\x02")
    for name in ("cut.so", "fifo.so", "tiny.so"):
        try:
            found = nccl_lib.nccl_identity(str(tmp_path / name))
        except ValueError as exc:
            assert name in str(exc) or "no library" in str(exc)
        else:
            assert name == "cut.so" and found["build_id"] is None  # its notes lie beyond the 100 bytes kept
