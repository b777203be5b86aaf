#!/usr/bin/env python3
"""Property-based fuzzing of /v1/completions and /v1/chat/completions with Hypothesis.

Bodies are generated from the API's documented fields (docs/http-api.md) with values that
are valid, of the wrong type, out of range, or raw JSON numbers no float can hold (1e309),
plus unknown keys, non-object JSON and bytes that are not JSON. The property: every answer
is a 2xx, or a 4xx whose body is OpenAI's error object; never a 5xx, never a dropped
connection; and afterwards the server still serves (health and a plain completion).

    tests/http/openai_fuzz_test.py --bin_dir build/bin [--examples N]

Runs against a local cluster on stories260K ($FOLIO_MODELS_DIR, else the embedded one); exit
77 when python3-hypothesis is missing. Deterministic by default (derandomized); set
FOLIO_FUZZ_RANDOM=1 for fresh examples.
"""
import argparse
import http.client
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from local_cluster import LocalCluster  # noqa: E402

try:
    from hypothesis import HealthCheck, given, settings, strategies as st
except ImportError:
    print("SKIP: python3-hypothesis is not installed (apt-get install python3-hypothesis)")
    sys.exit(77)

RAW = "\x00raw:"  # a string value starting with this is written as the raw JSON after it
RAW_NUMBERS = ["1e309", "-1e309", "1e400", "4.5", "4.0", "-0.0", "99999999999999999999999",
               "-99999999999999999999999", "1e-400", "3000000000", "-2147483649",
               "18446744073709551616", "0.1e1", "1E2"]

junk = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2 ** 70), max_value=2 ** 70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([RAW + n for n in RAW_NUMBERS]),
    st.text(max_size=20), st.lists(st.integers(-5, 600), max_size=5),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)
small_int = st.one_of(st.integers(min_value=-3, max_value=24), junk)
prob = st.one_of(st.floats(min_value=-0.5, max_value=2.5, allow_nan=False), junk)
token_ids = st.lists(st.integers(min_value=-2, max_value=600), min_size=0, max_size=8)
text = st.text(max_size=40)
stop = st.one_of(text, st.lists(text, max_size=4), junk)

COMMON = {
    "model": st.one_of(st.just("stories260K"), st.just("default"), text, junk),
    "max_tokens": small_int, "temperature": prob, "top_p": prob, "top_k": small_int,
    "min_p": prob, "seed": st.one_of(st.integers(-5, 2 ** 64), junk), "stop": stop,
    "stop_token_ids": st.one_of(token_ids, junk), "ignore_eos": st.one_of(st.booleans(), junk),
    "n": st.one_of(st.integers(-1, 3), junk), "best_of": st.one_of(st.integers(0, 3), junk),
    "stream": st.one_of(st.booleans(), junk),
    "stream_options": st.one_of(st.fixed_dictionaries({"include_usage": st.one_of(st.booleans(), junk)}), junk),
    "presence_penalty": prob, "frequency_penalty": prob, "logit_bias": junk, "user": junk,
    "response_format": st.one_of(st.just({"type": "text"}), st.just({"type": "json_object"}), junk),
}
COMPLETIONS = dict(COMMON, **{
    "prompt": st.one_of(text, token_ids, st.lists(text, max_size=2), st.lists(token_ids, max_size=2), junk),
    "echo": st.one_of(st.booleans(), junk), "logprobs": st.one_of(st.integers(-1, 25), junk),
    "suffix": st.one_of(st.just(""), text, junk),
})
message = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant", "tool", "x"]),
                           "content": st.one_of(text, junk,
                                                st.lists(st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url"]),
                                                                                "text": text}), max_size=2))}),
    junk)
CHAT = dict(COMMON, **{
    "messages": st.one_of(st.lists(message, min_size=1, max_size=4), junk),
    "max_completion_tokens": small_int, "logprobs": st.one_of(st.booleans(), junk),
    "top_logprobs": st.one_of(st.integers(-1, 25), junk),
    "add_generation_prompt": st.one_of(st.booleans(), junk), "tools": junk,
})


def bodies(fields, valid):
    # Mostly a body of plausible values with up to two fields made junk; sometimes every
    # field anything; sometimes not a JSON object at all.
    plausible = st.tuples(st.fixed_dictionaries(valid[0], optional=valid[1]),
                          st.dictionaries(st.sampled_from(sorted(fields) + ["x_unknown"]), junk, max_size=2))
    anything = st.fixed_dictionaries({}, optional=dict(fields, **{"x_unknown": junk}))
    return st.one_of(
        plausible.map(lambda t: ("json", dict(t[0], **t[1]))),
        plausible.map(lambda t: ("json", t[0])),
        anything.map(lambda d: ("json", d)),
        st.binary(max_size=64).map(lambda b: ("bytes", b)),
        st.one_of(st.lists(st.integers(), max_size=3), st.text(max_size=10), st.none()).map(lambda v: ("json", v)),
    )


VALID_COMMON = {
    "max_tokens": st.integers(0, 16), "temperature": st.floats(0, 2), "top_p": st.floats(0.01, 1),
    "top_k": st.integers(0, 50), "min_p": st.floats(0, 1), "seed": st.integers(0, 2 ** 63),
    "stop": st.lists(st.text(min_size=1, max_size=5), max_size=3), "ignore_eos": st.booleans(),
    "stream": st.booleans(), "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
    "stop_token_ids": st.lists(st.integers(0, 511), max_size=3), "n": st.just(1),
}
VALID_COMPLETIONS = ({"prompt": st.one_of(st.text(max_size=30), st.lists(st.integers(1, 511), min_size=1, max_size=8))},
                     dict(VALID_COMMON, echo=st.booleans(), logprobs=st.integers(0, 5)))
VALID_CHAT = ({"messages": st.lists(st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant"]),
                                                           "content": st.text(max_size=30)}), min_size=1, max_size=3)},
              dict(VALID_COMMON, max_completion_tokens=st.integers(0, 16), logprobs=st.booleans()))


def encode(kind, value):
    if kind == "bytes":
        return value
    text = json.dumps(value)
    # Raw numbers replace the quoted markers.
    for n in RAW_NUMBERS:
        text = text.replace(json.dumps(RAW + n), n)
    return text.encode()


class Client:
    def __init__(self, port):
        self.port = port
        self.conn = None

    def post(self, path, body):
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            try:
                self.conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
                r = self.conn.getresponse()
                data = r.read()
                if r.getheader("Connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return r.status, r.getheader("Content-Type", ""), data
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # A keep-alive connection the server closed between requests may be
                # retried once; a second failure is a dropped request.
                self.conn = None
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")


def check_answer(path, body, status, ctype, data):
    where = f"{path} {body[:300]!r} -> {status} {data[:300]!r}"
    assert status < 500, "5xx: " + where
    assert 200 <= status < 300 or 400 <= status < 500, where
    if status >= 400:
        err = json.loads(data)
        assert isinstance(err.get("error"), dict), where
        assert isinstance(err["error"].get("message"), str) and err["error"]["message"], where
        assert isinstance(err["error"].get("type"), str), where
        return
    if ctype.startswith("text/event-stream"):
        events = [e for e in data.decode().split("\n\n") if e]
        assert events and events[-1] == "data: [DONE]", where
        for e in events[:-1]:
            chunk = json.loads(e[len("data: "):])
            assert "error" not in chunk, "error event: " + where
    else:
        assert "choices" in json.loads(data), where


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin_dir", required=True)
    p.add_argument("--examples", type=int, default=int(os.environ.get("FOLIO_FUZZ_EXAMPLES", "250")))
    args = p.parse_args()
    with LocalCluster(args.bin_dir, ["--max_num_seqs=8", "--kv_cache_bytes=16MiB"]) as cluster:
        client = Client(cluster.http_port)
        counts = {}
        cfg = settings(max_examples=args.examples, deadline=None, database=None,
                       derandomize=not os.environ.get("FOLIO_FUZZ_RANDOM"),
                       suppress_health_check=list(HealthCheck))

        for path, fields, valid in (("/v1/completions", COMPLETIONS, VALID_COMPLETIONS),
                                    ("/v1/chat/completions", CHAT, VALID_CHAT)):
            @cfg
            @given(bodies(fields, valid))
            def prop(case):
                body = encode(*case)
                status, ctype, data = client.post(path, body)
                counts[status // 100] = counts.get(status // 100, 0) + 1
                check_answer(path, body, status, ctype, data)
            prop()

        # Still serving.
        status, _, data = client.post("/v1/completions", json.dumps({"prompt": "Once", "max_tokens": 4}).encode())
        assert status == 200, data
        conn = http.client.HTTPConnection("127.0.0.1", cluster.http_port, timeout=10)
        conn.request("GET", "/health")
        assert conn.getresponse().status == 200
        print(f"answers by class: {dict(sorted(counts.items()))} (2 = 2xx, 4 = 4xx); no 5xx")
        # Both kinds must have been exercised, or the property says little.
        assert counts.get(2, 0) > 0 and counts.get(4, 0) > 0, counts
    return 0


if __name__ == "__main__":
    sys.exit(main())
