"""The front door (module_utils/plan/door.py): nginx's configuration (the key asked on every route but GET /health,
vLLM behind it on its socket, streaming unbuffered), the key file, the keys nginx could not hold, and the container's
confinement."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.dgx_spark.vllm.plugins.filter import door as door_filter
from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import door


def test_every_route_but_the_health_route_asks_for_the_key():
    text = door.nginx_conf("10.209.0.10", 8000)
    assert "listen 10.209.0.10:8000;" in text and text.count("listen ") == 1
    assert "server unix:/run/dgx-spark-door/vllm.sock;" in text
    # The one open location is exact (nginx matches it on the normalized path), GET (and HEAD) only.
    assert text.count("location ") == 2 and "location = /health {" in text and "limit_except GET" in text
    catch_all = text.split("location / {", 1)[1]
    assert catch_all.index("if ($dgx_key_ok = 0)") < catch_all.index("proxy_pass")
    assert "return 401" in catch_all and "proxy_buffering off;" in catch_all and 'proxy_set_header Authorization "";' in catch_all
    # nginx refuses to start when a map's key outgrows its hash bucket: "Bearer " and the longest key allowed fit
    assert "map_hash_bucket_size 256;" in text and len("Bearer ") + 200 < 256 and text.index("map_hash") < text.index("include")
    assert "include /etc/dgx-spark-door/keys.conf;" in text and "access_log off;" in text and "server_tokens off;" in text


def test_the_gateways_door_asks_the_same_and_passes_the_key_on_to_litellm():
    """In front of the gateway the door is the same but for what stands behind it: LiteLLM's socket, its keyless
    liveness for the health route, and the client's key passed on (LiteLLM checks it again)."""
    from ansible_collections.dgx_spark.vllm.plugins.module_utils.plan import gateway

    text = door.nginx_conf("10.209.0.10", 8000, gateway.BEHIND_DOOR)
    vllm = door.nginx_conf("10.209.0.10", 8000)
    assert "server unix:/run/dgx-spark-door/gateway.sock;" in text and "location = /health {" in text
    assert "proxy_pass http://behind/health/liveliness;" in text and "proxy_pass http://behind/health;" in vllm
    assert 'proxy_set_header Authorization "";' not in text and text.split("location / {", 1)[1].index("return 401") > 0
    assert text.replace("gateway.sock", "vllm.sock").replace("/health/liveliness", "/health") == vllm.replace(
        '\n            proxy_set_header Authorization "";', "")


def test_the_key_file_maps_the_bearer_header_and_refuses_what_nginx_could_not_hold():
    key = "A" * 20 + "b9"
    assert '"~^Bearer %s$" 1;' % key in door_filter.door_keys(key + "\n") and "default 0;" in door.keys_conf(key)
    # A regular expression, matched case-sensitively (a map's strings are matched ignoring case), each other character
    # escaped: "." matches a dot only.
    assert '"~^Bearer k\\.y\\+z\\/0\\=1\\-2\\~3\\_45678$" 1;' in door.keys_conf("k.y+z/0=1-2~3_45678")
    for bad in ("short", 'has"quote-and-is-long-enough', "has space but long enough", "dollar$sign-long-enough-x", ""):
        with pytest.raises(AnsibleFilterError) as failed:
            door_filter.door_keys(bad)
        assert "letters, digits" in str(failed.value) and (not bad or bad not in str(failed.value))


def test_the_door_holds_no_secret_in_its_spec_and_a_new_key_recreates_it():
    one = door.plan("c-door-h", door.IMAGE, {"l": "1"}, "0.0.0.0", 8000, "/s/door", "/s/container/door", "digest-1")
    two = door.plan("c-door-h", door.IMAGE, {"l": "1"}, "0.0.0.0", 8000, "/s/door", "/s/container/door", "digest-2")
    spec = one["container"]
    assert spec["cap_drop"] == ["ALL"] and spec["read_only"] and spec["security_opts"] == ["no-new-privileges"]
    assert all(v.endswith(":ro") for v in spec["volumes"]) and spec["env"] == {} and spec["network_mode"] == "host"
    assert spec["labels"]["dgx_spark.vllm.config_hash"] != two["container"]["labels"]["dgx_spark.vllm.config_hash"]
    assert "digest" not in str(spec["command"])


def test_the_keyless_check_expects_the_doors_401_on_every_route_asked():
    """A route vLLM answers 404 (or a POST it answers 422) must not pass for refused: only the door's 401 does, and a
    check that asks nothing fails."""
    from ansible_collections.dgx_spark.vllm.plugins.module_utils.verify import endpoint_check

    class Answer(Exception):
        def __init__(self, code):
            super().__init__(code)
            self.code = code

    class Client:
        base = "http://door"

        def __init__(self, codes):
            self.codes, self.asked = codes, []

        def get(self, path, keyless=False):
            self.asked.append(("GET", path, keyless))
            raise Answer(self.codes.get(path, 401))

        def post(self, path, body, keyless=False):
            self.asked.append(("POST", path, keyless))
            raise Answer(self.codes.get(path, 401))

    for codes, refused in (({}, True), ({"/load": 404}, False), ({"/invocations": 422}, False), ({"/metrics": 200}, False)):
        result, client = {"errors": []}, Client(codes)
        endpoint_check.refused_without_key(client, result, door.KEYLESS_CHECKED, door.UNAUTHORIZED_STATUS)
        assert result["refused_without_key"] is refused and bool(result["errors"]) is not refused, (codes, result)
        assert ("POST", "/invocations", True) in client.asked and all(keyless for dummy, dummy2, keyless in client.asked)
    result = {"errors": []}
    endpoint_check.refused_without_key(Client({}), result, [], 401)
    assert result["errors"] and "refused_without_key" not in result
