"""A bounded load generator for the simulated cluster's endpoint: N concurrent streams of chat completions, half of them
streaming, each request small. Aimed only at the simulated head's management address on this machine; it stops at
its request or time limit, whichever comes first."""

import json
import threading
import time
import urllib.request

ENDPOINT = "http://10.209.0.10:8000/v1/chat/completions"  # the simulated head (inventories/sim), never another host


class Load:
    def __init__(self, key, streams=8, max_requests=2000, max_seconds=900, model="sim-tiny"):
        self.key, self.streams, self.model = key, streams, model
        self.max_requests, self.deadline = max_requests, time.monotonic() + max_seconds
        self.results = []  # (start, end, ok, streaming, error)
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.threads = [threading.Thread(target=self._stream, args=(i % 2 == 1,), daemon=True) for i in range(streams)]

    def _request(self, streaming):
        body = {"model": self.model, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4, "stream": streaming}
        request = urllib.request.Request(ENDPOINT, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json", "Authorization": "Bearer " + self.key})
        with urllib.request.urlopen(request, timeout=60) as answer:
            data = answer.read().decode()
        if streaming:
            chunks = [line[6:] for line in data.splitlines() if line.startswith("data: ")]
            if not chunks or chunks[-1] != "[DONE]" or not any(json.loads(c)["choices"] for c in chunks[:-1]):
                raise ValueError("incomplete stream: %r" % data[-200:])
        elif not json.loads(data)["choices"][0]["message"]["content"] and json.loads(data)["usage"]["completion_tokens"] < 1:
            raise ValueError("empty answer")

    def _stream(self, streaming):
        while not self.stop_event.is_set() and time.monotonic() < self.deadline:
            with self.lock:
                if len(self.results) >= self.max_requests:
                    return
            start = time.monotonic()
            try:
                self._request(streaming)
                ok, error = True, None
            except Exception as exc:  # noqa: BLE001 - every failure counts
                ok, error = False, repr(exc)[:200]
            with self.lock:
                self.results.append((start, time.monotonic(), ok, streaming, error))
            if not ok:
                time.sleep(0.5)  # a refused connection returns at once; do not spin

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout=90)

    def figures(self):
        """Requests, failures, how many streamed, the requests per second, and the outage: the longest time between two
        answers (from the first request's start), which is what a client sees as the endpoint not answering."""
        with self.lock:
            rows = sorted(self.results)
        ends = sorted(r[1] for r in rows if r[2])
        marks = ([rows[0][0]] if rows else []) + ends
        outage = max((b - a for a, b in zip(marks, marks[1:])), default=0.0)
        failures = [r for r in rows if not r[2]]
        span = (rows[-1][1] - rows[0][0]) if rows else 0.0
        return {"requests": len(rows), "failed": len(failures), "streaming": sum(1 for r in rows if r[3]),
                "per_second": round(len(rows) / span, 1) if span else 0.0, "outage_s": round(outage, 1),
                "first_errors": [r[4] for r in failures[:3]],
                "answered_after_last_failure": bool(ends) and (not failures or max(r[0] for r in failures) < ends[-1])}
