"""kept_image: the verified image kept under this cluster's tag, the tags the record no longer keeps let go of, the
head's record written where it differs; only this cluster's kept tags are ever touched."""

import json
import os

from ansible_collections.dgx_spark.vllm.plugins.module_utils.node import kept_image

KEPT = "dgx-spark-vllm-kept"


class Docker:
    """What the node's docker answers: ``tags`` listed (as `docker image ls --filter reference=...` lists them)."""

    def __init__(self, tags, refuse=None):
        self.tags, self.refuse, self.calls = list(tags), refuse or {}, []

    def __call__(self, argv):
        self.calls.append(argv)
        if argv[:3] == ["docker", "image", "ls"]:
            pattern = argv[-1].split("=", 1)[1].rstrip("*")
            return 0, "".join(t + "\n" for t in self.tags if t.startswith(pattern)), ""
        if argv[:2] == ["docker", "tag"]:
            self.tags.append(argv[3])
            return 0, "", ""
        if argv[:3] == ["docker", "image", "rm"]:
            if argv[3] in self.refuse:
                return 1, "", self.refuse[argv[3]]
            self.tags.remove(argv[3])
            return 0, "Untagged: " + argv[3], ""
        raise AssertionError(argv)


def record(*kept):
    return {"kept_image": kept[-1], "kept_images": list(kept), "image": "vllm-local:26.06"}


def test_the_verified_image_is_tagged_and_the_tags_the_record_dropped_go(tmp_path):
    docker = Docker(["%s:lab-aaaaaaaaaaaa" % KEPT, "%s:lab-bbbbbbbbbbbb" % KEPT, "%s:other-cccccccccccc" % KEPT])
    path = tmp_path / "last-known-good.json"
    done, problem = kept_image.keep(record("%s:lab-bbbbbbbbbbbb" % KEPT, "%s:lab-dddddddddddd" % KEPT), "vllm-local:26.06",
                                    "lab", docker, record_files={str(path): record("%s:lab-bbbbbbbbbbbb" % KEPT, "%s:lab-dddddddddddd" % KEPT)})
    assert problem is None
    assert done == ["kept vllm-local:26.06 as %s:lab-dddddddddddd" % KEPT, "let go of %s:lab-aaaaaaaaaaaa" % KEPT,
                    "wrote %s" % path]
    assert sorted(docker.tags) == ["%s:lab-bbbbbbbbbbbb" % KEPT, "%s:lab-dddddddddddd" % KEPT, "%s:other-cccccccccccc" % KEPT]
    assert json.loads(path.read_text())["kept_image"] == "%s:lab-dddddddddddd" % KEPT
    again = Docker(docker.tags)
    assert kept_image.keep(record("%s:lab-bbbbbbbbbbbb" % KEPT, "%s:lab-dddddddddddd" % KEPT), "vllm-local:26.06", "lab",
                           again, record_files={str(path): record("%s:lab-bbbbbbbbbbbb" % KEPT, "%s:lab-dddddddddddd" % KEPT)}) == ([], None)
    assert [c[:3] for c in again.calls] == [["docker", "image", "ls"]]  # a node that holds it all: one listing, nothing else


def test_check_mode_says_what_it_would_do_and_does_nothing(tmp_path):
    docker = Docker(["%s:lab-aaaaaaaaaaaa" % KEPT])
    path = tmp_path / "record.json"
    done, problem = kept_image.keep(record("%s:lab-dddddddddddd" % KEPT), "img", "lab", docker, check=True, record_files={str(path): {}})
    assert problem is None and len(done) == 3 and not path.exists()
    assert docker.tags == ["%s:lab-aaaaaaaaaaaa" % KEPT] and len(docker.calls) == 1


def test_an_image_another_container_uses_keeps_its_tag_and_other_failures_are_named():
    used = "%s:lab-aaaaaaaaaaaa" % KEPT
    docker = Docker([used], refuse={used: "Error response from daemon: conflict: unable to remove repository reference"})
    assert kept_image.keep(record("%s:lab-dddddddddddd" % KEPT), "img", "lab", docker) == (
        ["kept img as %s:lab-dddddddddddd" % KEPT], None)
    broken = Docker([used], refuse={used: "Cannot connect to the Docker daemon"})
    done, problem = kept_image.keep(record("%s:lab-dddddddddddd" % KEPT), "img", "lab", broken)
    assert problem == "cannot remove %s: Cannot connect to the Docker daemon" % used


def test_the_compile_caches_of_images_let_go_of_go_with_them_following_no_link(tmp_path):
    # The folder a container writes: a cache per image and configuration, a link a container planted, a name not ours.
    cache, outside = tmp_path / "cache", tmp_path / "outside"
    outside.mkdir()
    (outside / "keep-me").write_text("root's")
    for name in ("aaaaaaaaaaaa-111111111111", "bbbbbbbbbbbb-222222222222", "dddddddddddd-333333333333", "notes"):
        (cache / name / "torch_compile_cache").mkdir(parents=True)
    (cache / "aaaaaaaaaaaa-111111111111" / "escape").symlink_to(outside)
    (cache / "cccccccccccc-444444444444").symlink_to(outside)
    docker = Docker(["%s:lab-aaaaaaaaaaaa" % KEPT, "%s:lab-bbbbbbbbbbbb" % KEPT])
    kept = dict(record("%s:lab-bbbbbbbbbbbb" % KEPT, "%s:lab-dddddddddddd" % KEPT), image_id="sha256:dddddddddddd" + "0" * 52)
    done, problem = kept_image.keep(kept, "img", "lab", docker, check=True, cache_dir=str(cache))
    assert problem is None and "removed the compile cache aaaaaaaaaaaa-111111111111" in done and len(os.listdir(cache)) == 5
    done, problem = kept_image.keep(kept, "img", "lab", docker, cache_dir=str(cache))
    assert [d for d in done if "compile cache" in d] == ["removed the compile cache aaaaaaaaaaaa-111111111111",
                                                         "removed the compile cache cccccccccccc-444444444444"]
    assert sorted(os.listdir(cache)) == ["bbbbbbbbbbbb-222222222222", "dddddddddddd-333333333333", "notes"]
    assert (outside / "keep-me").read_text() == "root's"  # neither link was followed
