"""tools/gpu-bench.sh's llama.cpp column, in the CPU dry run (BENCH_TINY=1):
BENCH_LLAMA_SERVER points at a stand-in for llama-server (tools/stubserver
behind a script that takes llama-server's flags and drops kept-alive
connections the way llama-server does). The served stage must start it once
per level with the flags of the brief's command line, save its results
beside sluice's, and put the llama.cpp columns into report.md."""
import json
import os
import signal
import subprocess

from paths import BUILD, REPO, tool

STAND_IN = """#!/bin/sh
# llama-server's command line in, tools/stubserver out
echo "$@" >> "{args}"
echo $$ >> "{pids}"
host=; port=
while [ $# -gt 0 ]; do
  case $1 in --host) host=$2; shift ;; --port) port=$2; shift ;; esac
  shift
done
exec "{stub}" --host "$host" --port "$port" --threads 1 --token-us 2000 --close-idle-after 3
"""


def test_served_stage_runs_llama_server_per_level(tmp_path):
    args, pids = tmp_path / "args.log", tmp_path / "pids"
    stand_in = tmp_path / "llama-server"
    stand_in.write_text(STAND_IN.format(args=args, pids=pids, stub=tool("stubserver")))
    stand_in.chmod(0o755)
    state, out = tmp_path / "state", tmp_path / "out"
    env = dict(os.environ, BENCH_TINY="1", BENCH_LEVELS="1,2", BENCH_DURATION="1", SLUICE_BUILD_DIR=str(BUILD),
               BENCH_STATE=str(state), OUT=str(out), SLUICE_MODELS=str(tmp_path / "models"),
               BENCH_LLAMA_SERVER=str(stand_in), BENCH_LLAMA_ARGS="--flash-attn on",
               BENCH_LLAMA_CTX_PER_SLOT="300")
    p = subprocess.Popen([str(REPO / "tools" / "gpu-bench.sh"), "served", "1b", "q4"], env=env, cwd=REPO,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        text, _ = p.communicate(timeout=240)
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)   # its EXIT trap stops the server it started
            p.wait()
        for pid in (pids.read_text().split() if pids.exists() else []):
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert p.returncode == 0, text

    # one llama-server per level: slots = the level, context = slots x per-slot need
    model = tmp_path / "models" / "tiny-llama3-Q4_K_M.gguf"
    calls = [line.split() for line in args.read_text().splitlines()]
    assert len(calls) == 2, calls
    for call, level in zip(calls, (1, 2)):
        port = call[call.index("--port") + 1]
        assert call == ["-m", str(model), "--host", "127.0.0.1", "--port", port, "-np", str(level),
                        "-c", str(level * 300), "-ngl", "999", "--cont-batching", "--flash-attn", "on"], call

    # results beside sluice's, one level per server, merged in level order
    ours = json.loads((state / "served-1b-Q4_K_M.json").read_text())["levels"]
    theirs = json.loads((state / "served-1b-Q4_K_M-llamacpp.json").read_text())["levels"]
    assert [lv["concurrency"] for lv in ours] == [lv["concurrency"] for lv in theirs] == [1, 2]
    for lv in theirs:
        # the stand-in drops every connection after 3 responses: retried, never an error
        assert lv["errors_total"] == 0 and lv["requests_ok"] > 3 and lv["retried_stale"] > 0, lv
        assert lv["completion_tokens"] == 128 * lv["requests_ok"]
    assert (out / "served-1b-Q4_K_M-llamacpp.json").exists(), "published to $OUT"

    report = (state / "report.md").read_text()
    head = next(line for line in report.splitlines() if line.startswith("| model | c |"))
    for col in ("llama.cpp tok/s", "llama.cpp TTFT p50 ms", "sluice / llama.cpp tok/s"):
        assert col in head, head
    for lv, their in zip(ours, theirs):
        row = next(line for line in report.splitlines() if line.startswith(f"| 1b Q4_K_M | {lv['concurrency']} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == len(head.strip("|").split("|")), row
        assert cells[10] == f"{their['output_tok_s']:,.0f}" and cells[11] == f"{their['ttft_ms']['p50']:.1f}", row
        assert cells[12] == f"{lv['output_tok_s'] / their['output_tok_s']:.3g}x", row


def test_bad_llama_settings_refused_at_once(tmp_path):
    """A BENCH_LLAMA_SERVER that is not an executable file, or a per-slot
    context that is not a positive number, stops the script before it builds
    a model or starts a server (exit 2, the reason on stderr)."""
    base = dict(os.environ, BENCH_TINY="1", SLUICE_BUILD_DIR=str(BUILD), BENCH_STATE=str(tmp_path / "state"),
                OUT=str(tmp_path / "out"), SLUICE_MODELS=str(tmp_path / "models"))
    for extra, why in (({"BENCH_LLAMA_SERVER": str(tmp_path / "no-such-llama-server")}, "not an executable file"),
                       ({"BENCH_LLAMA_SERVER": str(tmp_path)}, "not an executable file"),
                       ({"BENCH_LLAMA_CTX_PER_SLOT": "0"}, "BENCH_LLAMA_CTX_PER_SLOT"),
                       ({"BENCH_LLAMA_CTX_PER_SLOT": "12k"}, "BENCH_LLAMA_CTX_PER_SLOT")):
        r = subprocess.run([str(REPO / "tools" / "gpu-bench.sh"), "served", "1b", "q4"], env=dict(base, **extra),
                           cwd=REPO, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and why in r.stderr, (extra, r.stdout + r.stderr)
        assert not (tmp_path / "models").exists() or not any((tmp_path / "models").iterdir())
