#!/usr/bin/env python3
"""tools/prefix-replay.py: replays a multi-turn chat against a running
OpenAI-compatible server and shows what the prefix cache saved on each turn.

    prefix-replay.py --url http://127.0.0.1:8080 [--turns 5] [--max-tokens 24]
                     [--system-words 60] [--user-words 20] [--json FILE]

(the defaults fit the shipped 12M model's 512 positions; give a larger
model more turns and longer messages)

Each turn sends the whole conversation so far (the system message, every
earlier user message and every earlier answer exactly as the server
returned it) plus a new user message, greedy, not streamed. Per turn:

  prompt    usage.prompt_tokens
  cached    usage.prompt_tokens_details.cached_tokens (what the cache gave)
  computed  prompt - cached: the prompt positions the server computed
  new       tokens the previous request did not have: for turn 1 the whole
            prompt, then prompt(t) - prompt(t-1) - completion(t-1), i.e. the
            template's end of the assistant turn, the new user message and
            the next assistant header
  excess    computed - new: what was recomputed although it was sent before

With a perfect cache, excess is at most the block size (16): the last,
partial block of what was cached is recomputed (hits are whole blocks), and
the previous turn's last token, sampled but never fed, has no KV. More means
the resent history did not tokenize as the server saw it the first time
(an answer that retokenizes differently, or a template that rewrites earlier
turns) or the cache evicted it. Exit status 0, or 1 on an HTTP failure.
Needs only the standard library.
"""
import argparse
import json
import sys
import urllib.error
import urllib.request

WORDS = ("time person year way day thing world life hand part child eye place work week case point company "
         "number group problem fact river stone light garden window music paper market winter summer bridge "
         "engine silver forest harbor letter mountain village question answer story history science language "
         "kitchen morning evening station island table chair road ocean cloud field animal doctor teacher city").split()


def text(n, seed):
    """n words, the same for the same seed (xorshift, like tools/loadgen)."""
    s, out = seed * 0x9E3779B97F4A7C15 + 1 & (2**64 - 1), []
    for _ in range(n):
        s ^= s << 13 & (2**64 - 1)
        s ^= s >> 7
        s ^= s << 17 & (2**64 - 1)
        out.append(WORDS[s % len(WORDS)])
    return " ".join(out)


def chat(url, body, timeout):
    req = urllib.request.Request(url.rstrip("/") + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:   # the server's error body says why
        raise OSError(f"HTTP {e.code}: {e.read().decode(errors='replace')[:300]}") from None


def replay(url, turns, max_tokens, system_words, user_words, timeout=300, model=None):
    """Runs the conversation; returns one dict per turn (the columns above)."""
    messages = [{"role": "system", "content": "You answer questions. " + text(system_words, 1)}] if system_words else []
    rows, prev = [], None
    for t in range(1, turns + 1):
        messages.append({"role": "user", "content": f"Question {t}: " + text(user_words, 100 + t)})
        body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0}
        if model:
            body["model"] = model
        r = chat(url, body, timeout)
        u = r["usage"]
        prompt, completion = u["prompt_tokens"], u["completion_tokens"]
        cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        new = prompt if prev is None else prompt - prev[0] - prev[1]
        rows.append({"turn": t, "prompt": prompt, "cached": cached, "computed": prompt - cached, "new": new,
                     "excess": prompt - cached - new, "completion": completion,
                     "finish": r["choices"][0]["finish_reason"]})
        messages.append({"role": "assistant", "content": r["choices"][0]["message"]["content"] or ""})
        prev = (prompt, completion)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="server, e.g. http://127.0.0.1:8080")
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--system-words", type=int, default=60, help="system message length in words (0: none)")
    ap.add_argument("--user-words", type=int, default=20, help="each user message's length in words")
    ap.add_argument("--model", help="model field (default: none, the server's model)")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--json", help="also write the rows as JSON")
    a = ap.parse_args()
    if a.turns < 1 or a.max_tokens < 1 or a.system_words < 0 or a.user_words < 1:
        ap.error("--turns, --max-tokens and --user-words must be >= 1, --system-words >= 0")
    try:
        rows = replay(a.url, a.turns, a.max_tokens, a.system_words, a.user_words, a.timeout, a.model)
    except (urllib.error.URLError, OSError, ValueError, KeyError) as e:
        print(f"prefix-replay: {e}", file=sys.stderr)
        return 1
    print(f"{'turn':>4} {'prompt':>7} {'cached':>7} {'computed':>8} {'new':>6} {'excess':>6} {'output':>6} finish")
    for r in rows:
        print(f"{r['turn']:>4} {r['prompt']:>7} {r['cached']:>7} {r['computed']:>8} {r['new']:>6} {r['excess']:>6} "
              f"{r['completion']:>6} {r['finish']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
