"""lm-evaluation-harness against ``edgeopt serve`` on a GGUF from llama.cpp's own converter (fp32), with tasks
from local YAML files and local data:

* ``local-completions`` on a multiple-choice task, scored through /v1/completions (batches of token-id
  prompts, echo + logprobs) with the server's own tokenizer (/tokenize, /tokenizer_info: lm-eval's remote
  tokenizer). Each choice's log-likelihood must equal the one transformers computes on the original
  checkpoint, within 1e-3.
* ``local-chat-completions`` on a generation task: every answer lm-eval records is the server's own greedy
  chat reply to the same messages."""

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


@pytest.fixture(scope="module")
def live(reference_gguf: Path):
    server = serve_path_live(reference_gguf, context=512, max_concurrency=4)
    yield server
    server.stop()


def run_lm_eval(tmp_path: Path, task: str, *args: str) -> list[dict]:
    """``lm_eval ... --tasks task`` offline, with the tasks folder tmp_path; the logged samples."""
    out = tmp_path / "results"
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(tmp_path / "datasets-cache"), "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "lm_eval", *args, "--tasks", task, "--include_path", str(tmp_path),
               "--log_samples", "--output_path", str(out)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [samples_file] = out.rglob(f"samples_{task}_*.jsonl")
    return [json.loads(line) for line in samples_file.read_text().splitlines()]


def test_lm_eval_local_completions_scores_equal_transformers(live, qwen2_checkpoint: Path, tmp_path: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    write_task(tmp_path)
    samples = run_lm_eval(tmp_path, TASK, "--model", "local-completions", "--model_args",
                          f"base_url={live.url}/v1/completions,model=tiny-ref,"  # tokenizer: found at /tokenize
                          "tokenized_requests=True,num_concurrent=1,max_retries=1", "--batch_size", "4")

    def tokenize(text: str) -> list[int]:
        return httpx.post(f"{live.url}/tokenize", json={"prompt": text, "add_special_tokens": False}).json()["tokens"]

    model = AutoModelForCausalLM.from_pretrained(qwen2_checkpoint, dtype="float32")
    hf_tokenizer = AutoTokenizer.from_pretrained(qwen2_checkpoint)
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


def test_lm_eval_local_chat_completions_records_the_servers_greedy_replies(live, tmp_path: Path):
    import openai

    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps({"question": d["question"], "answer": d["choices"][d["answer"]]}) + "\n"
                            for d in DOCS))
    (tmp_path / "edgeopt_tiny_gen.yaml").write_text(textwrap.dedent(f"""\
        task: edgeopt_tiny_gen
        dataset_path: json
        dataset_kwargs:
          data_files:
            test: {data}
        test_split: test
        output_type: generate_until
        doc_to_text: "{{{{question}}}}"
        doc_to_target: "{{{{answer}}}}"
        generation_kwargs:
          until: ["\\n"]
          max_gen_toks: 12
        metric_list:
          - metric: exact_match
        """))
    samples = run_lm_eval(tmp_path, "edgeopt_tiny_gen", "--model", "local-chat-completions", "--model_args",
                          f"base_url={live.url}/v1/chat/completions,model=tiny-ref,num_concurrent=1,max_retries=1",
                          "--apply_chat_template")
    client = openai.OpenAI(base_url=f"{live.url}/v1", api_key="x", max_retries=0, timeout=60)
    assert len(samples) == len(DOCS)
    assert sum(bool(sample["resps"][0][0]) for sample in samples) >= 2, "empty answers would prove little"
    for sample in samples:
        reply = client.chat.completions.create(model="tiny-ref", messages=[{"role": "user", "content":
                                                                             sample["doc"]["question"]}],
                                               max_tokens=12, temperature=0, stop=["\n"], seed=1234)
        assert sample["resps"][0][0] == reply.choices[0].message.content, sample
