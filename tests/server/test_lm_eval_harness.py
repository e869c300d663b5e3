"""lm-evaluation-harness's ``local-completions`` model against ``edgeopt serve`` on a GGUF from llama.cpp's own
converter (fp32): a multiple-choice task from a local YAML and local data, scored through /v1/completions
(batches of token-id prompts, echo + logprobs) with the server's own tokenizer (/tokenize, /tokenizer_info:
lm-eval's remote tokenizer). Each choice's log-likelihood must equal the one transformers computes on the
original checkpoint, within 1e-3."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from tests.server.gguf_file_server import serve_path_live

pytestmark = pytest.mark.timeout(600)
DOCS = [
    {"question": "What color is the sky on a clear day?", "choices": ["blue", "green", "red"], "answer": 0},
    {"question": "How many legs does a spider have?", "choices": ["six", "eight", "ten"], "answer": 1},
    {"question": "Which is a fruit?", "choices": ["carrot", "potato", "apple"], "answer": 2},
]
TASK = "edgeopt_tiny_mc"


def write_task(folder: Path) -> Path:
    data = folder / "docs.jsonl"
    data.write_text("".join(json.dumps(doc) + "\n" for doc in DOCS))
    (folder / f"{TASK}.yaml").write_text(textwrap.dedent(f"""\
        task: {TASK}
        dataset_path: json
        dataset_kwargs:
          data_files:
            test: {data}
        test_split: test
        output_type: multiple_choice
        doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
        doc_to_choice: "{{{{choices}}}}"
        doc_to_target: "{{{{answer}}}}"
        metric_list:
          - metric: acc
        """))
    return folder


def reference_loglikelihood(model, tokenize, context: str, continuation: str) -> float:
    """transformers' log-likelihood of ``continuation`` after ``context``, on the ids lm-eval sends (the
    pair split the way lm-eval's _encode_pair splits it)."""
    import torch

    whole = tokenize(context + continuation)
    context_ids = tokenize(context)
    with torch.no_grad():
        logits = model(torch.tensor([whole])).logits[0].double()
    logprobs = torch.log_softmax(logits, dim=-1)
    return float(sum(logprobs[i - 1, whole[i]] for i in range(len(context_ids), len(whole))))


def test_lm_eval_local_completions_scores_equal_transformers(reference_gguf: Path, qwen2_checkpoint: Path,
                                                              tmp_path: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tasks = write_task(tmp_path)
    live = serve_path_live(reference_gguf, context=512, max_concurrency=4)
    out = tmp_path / "results"
    try:
        env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "HF_DATASETS_CACHE": str(tmp_path / "datasets-cache"), "TOKENIZERS_PARALLELISM": "false"}
        args = [sys.executable, "-m", "lm_eval", "--model", "local-completions", "--model_args",
                f"base_url={live.url}/v1/completions,model=tiny-ref,"  # tokenizer: auto-detected /tokenize
                "tokenized_requests=True,num_concurrent=1,max_retries=1",
                "--tasks", TASK, "--include_path", str(tasks), "--batch_size", "4", "--log_samples",
                "--output_path", str(out)]
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=500)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

        def tokenize(text: str) -> list[int]:
            return httpx.post(f"{live.url}/tokenize", json={"prompt": text, "add_special_tokens": False}).json()["tokens"]

        model = AutoModelForCausalLM.from_pretrained(qwen2_checkpoint, dtype="float32")
        hf_tokenizer = AutoTokenizer.from_pretrained(qwen2_checkpoint)
        [samples_file] = out.rglob(f"samples_{TASK}_*.jsonl")
        samples = [json.loads(line) for line in samples_file.read_text().splitlines()]
        assert len(samples) == len(DOCS)
        checked = 0
        for sample in samples:
            # lm-eval logs each choice's request as {"gen_args_i": {"arg_0": context, "arg_1": continuation}} and
            # its response as [loglikelihood, is_greedy], both as text.
            requests = [sample["arguments"][f"gen_args_{i}"] for i in range(len(sample["arguments"]))]
            assert len(requests) == len(sample["doc"]["choices"])
            for request, (loglikelihood, _) in zip(requests, sample["filtered_resps"]):
                context, continuation = request["arg_0"], request["arg_1"]
                assert tokenize(context + continuation) == hf_tokenizer.encode(context + continuation)
                expected = reference_loglikelihood(model, tokenize, context, continuation)
                assert abs(float(loglikelihood) - expected) < 1e-3, (context, continuation, loglikelihood, expected)
                checked += 1
        assert checked == sum(len(doc["choices"]) for doc in DOCS)
    finally:
        live.stop()
