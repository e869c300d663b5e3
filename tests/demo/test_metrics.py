"""Perplexity helpers: the unigram baseline is right on known distributions; short text is a clear error."""

from __future__ import annotations

import math

import pytest
import torch

from edgeopt.demo.metrics import eval_windows, unigram_perplexity
from edgeopt.errors import EvaluationError


def test_unigram_perplexity_of_a_uniform_stream_is_the_vocabulary_size():
    stream = torch.arange(8).repeat(100)
    assert unigram_perplexity(stream, stream, vocab_size=8, seq_len=16) == pytest.approx(8.0, rel=0.01)


def test_unigram_perplexity_rewards_frequent_tokens():
    train = torch.tensor([0] * 90 + [1] * 10)
    frequent = unigram_perplexity(train, torch.zeros(64, dtype=torch.long), vocab_size=2, seq_len=16)
    rare = unigram_perplexity(train, torch.ones(64, dtype=torch.long), vocab_size=2, seq_len=16)
    assert frequent == pytest.approx(math.exp(-math.log(91 / 102)), rel=1e-6) and rare > 5 * frequent


def test_too_short_eval_text_is_a_clear_error():
    with pytest.raises(EvaluationError, match="10 tokens, fewer than one window of 256"):
        eval_windows(torch.arange(10), 256)
