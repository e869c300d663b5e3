"""A draft model must speak the target's vocabulary: same size, same token bytes at every id, same control
tokens. A draft whose token 17 is another text would propose tokens the target reads differently; a
vocabulary of the same size is not enough (two tokenizers trained apart both have 32000 entries)."""

from __future__ import annotations

from edgeopt.errors import ConfigError
from edgeopt.runtimes.base import Runtime


def check_same_vocabulary(target_runtime: Runtime, draft_runtime: Runtime, target_name: str, draft_name: str) -> None:
    """Raise a ConfigError naming both models and the first difference found, else return."""
    fix = ("use a draft made from the same tokenizer as the target (a smaller or more quantized sibling of the "
           "same family), or leave --draft out")
    target_size, draft_size = target_runtime.info.vocab_size, draft_runtime.info.vocab_size
    target, draft = target_runtime.tokenizer, draft_runtime.tokenizer
    if target_size != draft_size:
        raise ConfigError(f"the draft model {draft_name} has a {draft_size}-token vocabulary and the target "
                          f"{target_name} a {target_size}-token one: they are different vocabularies", fix)
    for token_id in range(target_size):
        want, got = target.token_bytes(token_id), draft.token_bytes(token_id)
        if want != got:
            raise ConfigError(f"the draft model {draft_name} and the target {target_name} have different "
                              f"vocabularies ({target_size} tokens each): token {token_id} is {got!r} in the draft "
                              f"and {want!r} in the target", fix)
    want_controls, got_controls = target.control_token_ids(), draft.control_token_ids()
    if want_controls != got_controls:
        differing = sorted(set(want_controls.items()) ^ set(got_controls.items()))[:3]
        raise ConfigError(f"the draft model {draft_name} and the target {target_name} have different control "
                          f"tokens (text, id) such as {differing}", fix)

