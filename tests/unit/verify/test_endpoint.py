"""endpoint: smoke-test requests and judges, the first streamed token."""

import pytest

from ansible_collections.dgx_spark.vllm.plugins.module_utils.verify import endpoint


TOOL = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


def response(content=None, reasoning=None, tool_calls=None, finish="stop"):
    message = {"role": "assistant", "content": content, "reasoning": reasoning, "tool_calls": tool_calls or []}
    return {"object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": finish}]}


@pytest.mark.parametrize("test,answer,passed,detail", [
    ({"kind": "chat"}, response("Hi"), True, "2 characters"),
    ({"kind": "chat"}, response(""), False, "empty answer"),
    ({"kind": "no_control_tokens", "tokens": ["<|im_end|>"]}, response("Hi<|im_end|>"), False, "control tokens leaked"),
    ({"kind": "tool_call", "tool": TOOL},
     response(None, tool_calls=[{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}],
              finish="tool_calls"), True, "get_weather({\"city\": \"Paris\"})"),
    ({"kind": "tool_call", "tool": TOOL}, response("<tool_call>get_weather Paris</tool_call>"), False, "the tool-call parser did not parse it"),
    ({"kind": "tool_call", "tool": TOOL},
     response(None, tool_calls=[{"function": {"name": "get_weather", "arguments": "{city"}}]), False, "not JSON"),
    ({"kind": "reasoning", "expect": "separated"}, response("51", reasoning="17*3=51"), True, "reasoning apart"),
    ({"kind": "reasoning", "expect": "separated"}, response("<think>17*3</think>51"), False, "think tags are in the content"),
    ({"kind": "reasoning", "expect": "inline"}, response("<think>17*3</think>51"), True, "inline"),
])
def test_smoke_judges(test, answer, passed, detail):
    ok, text = endpoint.judge(test, answer)
    assert ok is passed and detail in text


def test_smoke_request_offers_the_tool():
    body = endpoint.smoke_request("m", {"kind": "tool_call", "prompt": "weather?", "tool": TOOL, "max_tokens": 9})
    assert body["tools"][0]["function"]["name"] == "get_weather" and body["tool_choice"] == "auto" and body["max_tokens"] == 9


def test_first_streamed_token():
    lines = ['data: {"choices":[{"delta":{"role":"assistant","content":""}}]}', "",
             'data: {"choices":[{"delta":{"content":" run"}}]}', "data: [DONE]"]
    assert endpoint.first_token(lines) == (" run", 2)


def test_live_figures_from_two_reads_of_vllms_metrics():
    """Captured /metrics of vLLM 0.32 (the simulation's image) after a few completions; the second read is the same
    text with the counters moved as 20 more tokens would move them."""
    from helpers import read_fixture

    text = read_fixture("metrics", "vllm-0.32-cpu-sim-tiny.txt")
    before = endpoint.metric_sums(text)
    assert before["vllm:generation_tokens_total"] > 0 and before["vllm:kv_cache_usage_perc"] == 0.0
    assert "vllm:num_requests_waiting_by_reason" not in before  # a name that begins like one read is not it
    after = dict(before, **{"vllm:generation_tokens_total": before["vllm:generation_tokens_total"] + 20,
                            "vllm:kv_cache_usage_perc": 0.25, "vllm:num_requests_running": 2.0})
    live = endpoint.live(before, after, 2)
    assert live == {"seconds": 2, "output_tokens_per_second": 10.0, "prompt_tokens_per_second": 0.0, "kv_cache_usage": 0.25,
                    "running": 2.0, "waiting": 0.0}
    assert endpoint.live({}, after, 2)["output_tokens_per_second"] is None  # not exported: not made up
