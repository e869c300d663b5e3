"""Time to refuse the two prompts of issue 12 item 2, before (tokenize everything, then count) and after
(our linear special-token split, the bytes bound, the message cap), side by side in one run.

    .venv/bin/python tests/bench/bench_prompt_cost.py --gguf MODEL.gguf --tokenizer-json tokenizer.json \\
        [--contexts 256 4096] [--old-gguf-messages 20000]

MODEL.gguf is read by llama.cpp (its tokenizer), tokenizer.json by `tokenizers` (ONNX/torch bundles).
The old path on llama.cpp is quadratic in special tokens: for the 100k-message chat it would take minutes,
so it is timed on --old-gguf-messages messages and the size is printed with it.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

from edgeopt.demo.tokenizer import CHATML_TEMPLATE
from edgeopt.errors import RequestError
from edgeopt.server.chat.template import ChatTemplate
from edgeopt.server.chat.render import raw_prompt_ids
from edgeopt.server.chat.sampling import output_budget
from edgeopt.server.openai.schema import ChatCompletionRequest, CompletionRequest
from edgeopt.server.state import ServedModel
from edgeopt.runtimes.llama_cpp import load_gguf
from edgeopt.runtimes.bundle_tokenizer import BundleTokenizer

FLOOD = "<|endoftext|>a" * 25000


def seconds(work: Any) -> tuple[float, str]:
    start = time.perf_counter()
    try:
        result = f"accepted: {work()}"
    except (RequestError, ValueError) as exc:  # a refusal is the outcome we time
        result = f"{type(exc).__name__}: {str(exc)[:90]}"
    return time.perf_counter() - start, result


def new_completion(served: ServedModel, tokenizer: Any, context: int) -> int:
    """The route now: bytes bound, then (if it passes) our linear tokenizing, then the exact length check."""
    ids = raw_prompt_ids(served, FLOOD)
    return output_budget(None, len(ids), context, 16, prompt_param="prompt")


def old_completion(tokenizer: Any, raw_encode: Any, context: int) -> str:
    """The old route: tokenize the whole prompt (llama.cpp's own special-token parsing), then compare."""
    ids = raw_encode(FLOOD)
    return "refused" if len(ids) >= context else "fits"


def chat_messages(count: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": "hi"}] * count


def old_chat(raw_encode: Any, count: int) -> int:
    return len(raw_encode(ChatTemplate(CHATML_TEMPLATE).render(chat_messages(count))))


def compare(name: str, tokenizer: Any, raw_encode: Any, context: int, old_messages: int) -> dict[str, Any]:
    served = ServedModel(context_length=context, tokenizer=tokenizer, chat_template=ChatTemplate(CHATML_TEMPLATE))
    old_flood, _ = seconds(lambda: old_completion(tokenizer, raw_encode, context))
    new_flood, outcome = seconds(lambda: new_completion(served, tokenizer, context))
    tokenize_new, _ = seconds(lambda: tokenizer.encode(FLOOD))  # no bound: the tokenizer alone, now linear
    old_chat_s, _ = seconds(lambda: old_chat(raw_encode, old_messages))
    new_chat_s, chat_outcome = seconds(lambda: ChatCompletionRequest.model_validate(
        {"model": "m", "messages": chat_messages(100_000)}))
    return {"tokenizer": name, "context": context,
            "flood_350KB": {"old_refusal_s": round(old_flood, 3), "new_refusal_s": round(new_flood, 4),
                            "new_outcome": outcome, "ratio": round(old_flood / max(new_flood, 1e-6), 1),
                            "tokenize_all_now_s": round(tokenize_new, 3)},
            "chat_messages": {"old_messages": old_messages, "old_render_tokenize_s": round(old_chat_s, 3),
                              "new_messages": 100_000, "new_refusal_s": round(new_chat_s, 4),
                              "new_outcome": chat_outcome}}


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, required=True)
    parser.add_argument("--tokenizer-json", type=Path, required=True)
    parser.add_argument("--contexts", type=int, nargs="+", default=[256, 4096])
    parser.add_argument("--old-gguf-messages", type=int, default=20_000)
    args = parser.parse_args()
    print(json.dumps({"cpu": cpu_name()}))
    runtime = load_gguf(args.gguf, kv_capacity_tokens=256, max_slots=1, max_batch_tokens=64, threads=1,
                        n_gpu_layers=0)
    try:
        llama = runtime.tokenizer
        for context in args.contexts:
            print(json.dumps(compare("llama.cpp", llama, lambda t: llama._tokenize(t, True, True), context,
                                     args.old_gguf_messages)))
    finally:
        runtime.close()
    hf = BundleTokenizer(args.tokenizer_json)
    for context in args.contexts:
        print(json.dumps(compare("tokenizers", hf, hf.encode, context, 100_000)))


if __name__ == "__main__":
    main()
