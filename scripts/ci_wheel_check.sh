#!/usr/bin/env bash
# CI (issue 61): edgeopt as a device gets it, from its wheel and nothing of the clone. Builds the wheel, installs it
# into a fresh virtual environment outside the clone, checks the install pulled no torch, starts two `edgeopt
# worker`s from it on loopback and splits SmolLM2-135M across them with `edgeopt serve --workers` from the same
# environment (each worker capped so that the model fits neither it nor the head alone), then asks one question.
#
# Kept short by reuse: the install is pinned to the dev environment's versions, so pip takes every package from
# its cache (llama-cpp-python's wheel it built once), and the worker finds the build `make rpc-worker` made for
# that llama-cpp-python version in ~/.cache/edgeopt (EDGEOPT_CACHE); a cold cache builds it here, on first use.
#
# Usage: scripts/ci_wheel_check.sh [DEV_PYTHON]   (default .venv/bin/python: builds the wheel, finds SmolLM2's GGUF)
# Prints how long each step took.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
dev_python="$root/${1:-.venv/bin/python}"
[[ "${1:-}" == /* ]] && dev_python="$1"
work="$(mktemp -d "${TMPDIR:-/tmp}/edgeopt-wheel-check.XXXXXX")"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    local start; start=$(date +%s)
    rm -rf "$work"
    say "removed the temporary environment in $(seconds_since "$start")s"
}
trap cleanup EXIT
seconds_since() { echo $(( $(date +%s) - $1 )); }
say() { echo "wheel_check: $*"; }
fail() {
    say "FAILED: $1"
    for log in "$work"/*.log; do [[ -f "$log" ]] && { echo "--- $(basename "$log") (end)"; tail -n 30 "$log"; }; done
    exit 1
}
free_port() { "$dev_python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# Wait until PID listens on PORT (a bare TCP connect), up to SECONDS; fail naming WHAT when it exits first.
wait_listening() {
    local pid="$1" port="$2" seconds="$3" what="$4" start
    start=$(date +%s)
    until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
        kill -0 "$pid" 2>/dev/null || fail "$what exited before listening on $port"
        (( $(seconds_since "$start") < seconds )) || fail "$what not listening on $port after ${seconds}s"
        sleep 0.5
    done
}

total=$(date +%s)
step=$(date +%s)
# A copy: building writes build/ and edgeopt.egg-info beside the sources, and the clone's egg-info is the editable
# install's.
mkdir "$work/src"
cp -r edgeopt exporters runtimes profiles pyproject.toml setup.py README.md "$work/src/"
find "$work/src" -name __pycache__ -prune -exec rm -rf {} +
"$dev_python" -m pip wheel "$work/src" --no-deps --no-build-isolation --wheel-dir "$work/dist" -q >"$work/wheel.log" 2>&1 \
    || fail "the wheel did not build"
wheel=("$work"/dist/edgeopt-*.whl)
say "wheel $(basename "${wheel[0]}") built in $(seconds_since "$step")s"

step=$(date +%s)
"$dev_python" -m venv "$work/venv"
"$dev_python" -m pip freeze --exclude-editable | grep -E '^[A-Za-z0-9_.-]+==' >"$work/constraints.txt"
(cd "$work" && venv/bin/python -m pip install -q --no-compile -c constraints.txt "${wheel[0]}" >"$work/install.log" 2>&1) \
    || fail "pip install of the wheel failed"
"$work/venv/bin/python" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is not None)' \
    || fail "installing the wheel pulled torch: a serving device must not need it"
say "installed into a fresh venv in $(seconds_since "$step")s ($(du -sm "$work/venv" | cut -f1) MB, no torch)"

step=$(date +%s)
gguf="$("$dev_python" -c 'from edgeopt.demo.smollm2 import smollm2_gguf_path; print(smollm2_gguf_path())')"
edgeopt="$work/venv/bin/edgeopt"
cd "$work"  # nothing of the clone on the way: not its sources, not its scripts
worker_ports=()
for i in 1 2; do
    port="$(free_port)"
    "$edgeopt" worker --port "$port" --memory 70MiB --threads 1 >"$work/worker$i.log" 2>&1 &
    pids+=($!)
    worker_ports+=("$port")
    # the first worker may build the RPC worker (a cold cache): minutes; the second finds it built
    wait_listening "$!" "$port" 900 "edgeopt worker $i"
done
say "two workers listening after $(seconds_since "$step")s"

step=$(date +%s)
port="$(free_port)"
"$edgeopt" serve "$gguf" --port "$port" --workers "127.0.0.1:${worker_ports[0]},127.0.0.1:${worker_ports[1]}" \
    --memory 165MiB --context 512 --max-concurrency 2 --no-verify >"$work/serve.log" 2>&1 &
pids+=($!)
head_pid=$!
until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do
    kill -0 "$head_pid" 2>/dev/null || fail "edgeopt serve --workers exited"
    (( $(seconds_since "$step") < 180 )) || fail "edgeopt serve --workers not ready after 180s"
    sleep 0.5
done
for worker_port in "${worker_ports[@]}"; do
    grep -q "split: 127.0.0.1:$worker_port: layers" "$work/serve.log" \
        || fail "the head gave no layers to the worker on port $worker_port"
done
answer="$(venv/bin/python - "$port" <<'PY'
import json, sys, urllib.request

base = f"http://127.0.0.1:{sys.argv[1]}"
model = json.load(urllib.request.urlopen(base + "/v1/models", timeout=30))["data"][0]["id"]
body = {"model": model, "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}
request = urllib.request.Request(base + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
print(json.load(urllib.request.urlopen(request, timeout=120))["choices"][0]["text"].strip())
PY
)" || fail "the completion request failed"
[[ -n "$answer" ]] || fail "an empty completion"
say "head split SmolLM2 across both workers and answered in $(seconds_since "$step")s: \"$answer\""
say "passed in $(seconds_since "$total")s"
