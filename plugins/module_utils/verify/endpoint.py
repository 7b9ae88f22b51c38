# -*- coding: utf-8 -*-
# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Readiness and smoke checks of an OpenAI-compatible vLLM endpoint, as a user would check it.

Readiness is port -> ``/health`` 200 -> ``/v1/models`` lists the served name -> one streamed token.
A smoke test proves what a profile promises: a tool call parsed into ``tool_calls``, reasoning
separated from the content (or kept inline, per parser), no control tokens leaked. A wrong parser
fails silently in vLLM; these checks make it loud. The request builders and judges are pure; the
module does the HTTP.
"""

from __future__ import annotations

import json


def chat_request(model, prompt, max_tokens=16, stream=False, tools=None):
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0}
    if stream:
        body["stream"] = True
    if tools:
        body["tools"] = tools
        body["tool_choice"] = "auto"
    return body


def smoke_request(model, test):
    tools = None
    if test.get("kind") == "tool_call":
        tool = test["tool"]
        tools = [{"type": "function", "function": {"name": tool["name"], "description": tool.get("description", ""),
                                                   "parameters": tool.get("parameters", {"type": "object", "properties": {}})}}]
    return chat_request(model, test.get("prompt", "Hello"), test.get("max_tokens", 64), tools=tools)


def message_of(response):
    choices = (response or {}).get("choices") or [{}]
    return choices[0].get("message") or {}, choices[0].get("finish_reason")


def reasoning_of(message):
    return message.get("reasoning") or message.get("reasoning_content") or ""


def judge(test, response):
    """(passed, detail) for one smoke test against a chat completion response."""
    message, finish = message_of(response)
    content = message.get("content") or ""
    reasoning = reasoning_of(message)
    kind = test.get("kind")
    if kind == "chat":
        if content.strip() or finish == "length":
            return True, "%d characters, finish_reason %s" % (len(content), finish)
        return False, "empty answer (finish_reason %s)" % finish
    if kind == "no_control_tokens":
        leaked = [t for t in test.get("tokens", []) if t in content or t in reasoning]
        if leaked:
            return False, "control tokens leaked into the answer: %s; check the chat template and the parsers" % ", ".join(leaked)
        return True, "none of %d control tokens in %d characters" % (len(test.get("tokens", [])), len(content) + len(reasoning))
    if kind == "tool_call":
        calls = message.get("tool_calls") or []
        want = test["tool"]["name"]
        if not calls:
            hint = " (the text mentions %s: the tool-call parser did not parse it)" % want if want in content else ""
            return False, "no tool_calls in the answer%s; check --tool-call-parser and --enable-auto-tool-choice" % hint
        function = calls[0].get("function") or {}
        if function.get("name") != want:
            return False, "tool call names %r, expected %r" % (function.get("name"), want)
        try:
            json.loads(function.get("arguments") or "{}")
        except ValueError:
            return False, "tool call arguments are not JSON: %r" % function.get("arguments")
        return True, "%s(%s)" % (want, function.get("arguments"))
    if kind == "reasoning":
        expect = test.get("expect", "separated")
        if expect == "separated":
            if reasoning and "<think>" not in content and "</think>" not in content:
                return True, "%d characters of reasoning apart from %d of content" % (len(reasoning), len(content))
            if not reasoning:
                return False, "no reasoning field: the reasoning parser did not separate it%s" % (
                    " (think tags are in the content)" if "</think>" in content else "")
            return False, "think tags leaked into the content"
        if "</think>" in content and not reasoning:
            return True, "reasoning kept inline in <think> as the parser intends"
        return False, "expected the reasoning inline in <think> tags in the content"
    return False, "unknown smoke test kind %r" % kind


def first_token(lines):
    """From SSE lines of a streamed chat completion: the first generated text (or None) and the chunk count."""
    text, chunks = None, 0
    for line in lines:
        line = line.strip()
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            break
        try:
            chunk = json.loads(payload)
        except ValueError:
            continue
        chunks += 1
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            piece = delta.get("content") or delta.get("reasoning") or delta.get("reasoning_content")
            if piece and text is None:
                text = piece
    return text, chunks


def served_names(models_response):
    return [m.get("id") for m in (models_response or {}).get("data") or []]


def metric_sums(text):
    """{name: sum over its series} of Prometheus's text format (vLLM's /metrics), for the names :func:`live` reads."""
    sums = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in LIVE_METRICS:
            try:
                sums[name] = sums.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                continue
    return sums


LIVE_METRICS = ("vllm:generation_tokens_total", "vllm:prompt_tokens_total", "vllm:kv_cache_usage_perc",
                "vllm:num_requests_running", "vllm:num_requests_waiting")


def live(before, after, seconds):
    """What the endpoint does now, from two reads of /metrics ``seconds`` apart: tokens/s, KV cache use, requests.
    None where vLLM does not export the metric."""
    def rate(name):
        if name not in before or name not in after or seconds <= 0:
            return None
        return round(max(0.0, after[name] - before[name]) / seconds, 1)

    return {"seconds": seconds, "output_tokens_per_second": rate("vllm:generation_tokens_total"),
            "prompt_tokens_per_second": rate("vllm:prompt_tokens_total"),
            "kv_cache_usage": after.get("vllm:kv_cache_usage_perc"),
            "running": after.get("vllm:num_requests_running"), "waiting": after.get("vllm:num_requests_waiting")}
