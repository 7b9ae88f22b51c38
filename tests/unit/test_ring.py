"""ring: a switchless ring's links and prefix length (fact 9)."""

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils import ring


def test_ring_links_and_prefix():
    links = [{"subnet": "192.168.10.0/30", "a": "s1", "a_if": "p0", "b": "s2", "b_if": "p1"},
             {"subnet": "192.168.20.0/30", "a": "s2", "a_if": "p0", "b": "s3", "b_if": "p1"}]
    assert ring.links_of(links, "s2") == [
        {"interface": "p1", "address": "192.168.10.2/30", "peer": "s1", "peer_address": "192.168.10.1", "prefix_len": 30},
        {"interface": "p0", "address": "192.168.20.1/30", "peer": "s3", "peer_address": "192.168.20.2", "prefix_len": 30}]
    assert ring.prefix_len(links) == 30
    with pytest.raises(ring.RingError, match="different prefix lengths"):
        ring.prefix_len(links + [{"subnet": "10.0.0.0/24"}])
    with pytest.raises(ring.RingError, match="ring link 0"):
        ring.links_of([{"subnet": "192.168.10.1/30", "a": "s1"}], "s1")
