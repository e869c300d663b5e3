"""A client mix for several models on one server: conversations of a few turns that alternate between two chat
models (and, between chat turns, embedding requests to a third model), each turn's time to first token.

Conversations take turns round-robin, ordered so that consecutive chat requests name different models: with
room for one chat model at a time, every turn after a conversation's first finds its model swapped out since
its previous turn. Before each chat request the server is asked which models are loaded, so every sample
says whether it was a swap-back (its model had been unloaded since the conversation's previous turn) rather
than assuming it. A conversation's replies are the model's own (greedy), appended to its history as a chat
client does; each turn's prompt is ~200-350 tokens in SmolLM2's vocabulary.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

TOPICS = (
    ("a home-automation assistant for a two-storey house", "the heating schedule",
     ("Turn the living-room radiator down to nineteen degrees after ten in the evening on weekdays.",
      "What does the schedule do on Saturdays when nobody is at home during the afternoon?",
      "Could the bathroom towel rail run for half an hour before the first alarm instead of an hour?",
      "Summarise the changes we agreed so far in a short list I can read aloud to my family.")),
    ("a support agent for a small hardware shop that sells tools and fasteners", "drill bits for a shelf",
     ("I need to hang a heavy oak shelf on a brick wall; which drill bit and plugs should I buy here?",
      "The wall turned out to be plasterboard over brick with a gap; does that change the fixings?",
      "How many screws per bracket would you use for thirty kilograms of books on the shelf?",
      "Please list the parts with quantities so I can collect them from the counter this afternoon.")),
    ("a travel desk that plans train journeys across the country", "a weekend in the mountains",
     ("We are two adults with bicycles leaving on Friday evening; which trains take bikes on board?",
      "If the last connection is missed, is there a night bus or a hotel near the junction station?",
      "On Sunday we would rather come back before dinner; which departures fit that plan best?",
      "Write the final itinerary as a numbered list with the times and the platforms you know.")),
    ("a cooking coach who helps people plan meals for the week on a budget", "vegetarian dinners",
     ("Plan five vegetarian dinners for two people that use lentils, rice and seasonal vegetables.",
      "One of us cannot eat peppers; swap them out of the plan without repeating the same dish twice.",
      "Which of those dinners can be cooked on Sunday and kept in the fridge until Wednesday night?",
      "Give me the shopping list grouped by the aisles of an ordinary supermarket, with amounts.")),
)
SYSTEM_TAIL = ("Answer in plain sentences, keep every answer short and practical, ask a question back when the "
               "request is ambiguous, never invent facts you were not given, and remember what the user said "
               "earlier in this conversation because they will refer back to it in later turns.")


@dataclass
class Conversation:
    name: str
    model: str
    messages: list[dict[str, str]]
    user_turns: tuple[str, ...]


@dataclass(frozen=True)
class TurnSample:
    conversation: str
    model: str
    turn: int  # 1-based
    swapped_back: bool  # the model was not loaded just before this request, and served an earlier turn
    ttft_s: float
    seconds: float
    prompt_tokens: int
    cached_tokens: int | None  # usage.prompt_tokens_details.cached_tokens, None when the server omits it
    text: str

    def to_dict(self) -> dict[str, object]:
        return {**self.__dict__}


@dataclass
class MixResult:
    turns: list[TurnSample] = field(default_factory=list)
    embedding_seconds: list[float] = field(default_factory=list)


def conversations(models: tuple[str, str], per_model: int) -> list[Conversation]:
    """``per_model`` conversations for each model, interleaved A, B, A, B so that neighbours differ."""
    if per_model * 2 > len(TOPICS):
        raise ValueError(f"at most {len(TOPICS) // 2} conversations per model (there are {len(TOPICS)} topics), "
                         f"got {per_model}")
    out = []
    for index in range(per_model * 2):
        role, subject, turns = TOPICS[index]
        system = f"You are {role}. The user is asking about {subject}. {SYSTEM_TAIL}"
        out.append(Conversation(f"conv{index + 1}", models[index % 2], [{"role": "system", "content": system}], turns))
    return out


def stream_turn(client: httpx.Client, model: str, messages: list[dict[str, str]],
                max_tokens: int) -> tuple[float, float, str, dict]:
    """One streamed greedy chat completion: (TTFT s, total s, text, usage). TTFT is the time to the first chunk
    that carries text (a role-only first chunk does not count). Every chunk must name ``model`` (an Ollama-style
    ":latest" tag aside): an answer from another model is an error, not a sample."""
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    ttft, pieces, usage = None, [], {}
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            response.read()
            raise RuntimeError(f"{model}: HTTP {response.status_code}: {response.text[:500]}")
        for line in response.iter_lines():
            if not line.startswith("data:") or line.strip() == "data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            if chunk.get("model", model).removesuffix(":latest") != model:
                raise RuntimeError(f"asked {model}, answered by {chunk['model']}")
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or []:
                text = (choice.get("delta") or {}).get("content")
                if text:
                    ttft = ttft if ttft is not None else time.perf_counter() - start
                    pieces.append(text)
    if ttft is None:
        raise RuntimeError(f"{model}: the stream carried no text (max_tokens {max_tokens})")
    return ttft, time.perf_counter() - start, "".join(pieces), usage


def run_mix(client: httpx.Client, chats: list[Conversation], turns: int, max_tokens: int,
            loaded: Callable[[], set[str]], embed: Callable[[str], None] | None = None) -> MixResult:
    """Every conversation's turns 1..``turns``, round-robin; ``loaded()`` names the models loaded now;
    ``embed(text)`` (if given) embeds each conversation's next user message after its chat turn, as a RAG
    client looks up the documents for the question it is about to ask."""
    result = MixResult()
    served: set[str] = set()  # conversations whose model has answered them at least once
    for turn in range(turns):
        for chat in chats:
            chat.messages.append({"role": "user", "content": chat.user_turns[turn % len(chat.user_turns)]})
            swapped_back = chat.name in served and chat.model not in loaded()
            ttft, seconds, text, usage = stream_turn(client, chat.model, chat.messages, max_tokens)
            chat.messages.append({"role": "assistant", "content": text})
            served.add(chat.name)
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
            result.turns.append(TurnSample(chat.name, chat.model, turn + 1, swapped_back, ttft, seconds,
                                           int(usage.get("prompt_tokens", 0)), cached, text))
            if embed is not None:
                started = time.perf_counter()
                embed(chat.user_turns[(turn + 1) % len(chat.user_turns)])
                result.embedding_seconds.append(time.perf_counter() - started)
    return result
