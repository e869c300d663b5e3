"""Who is calling: the keys a server accepts, the caller each names, and what a caller may see.

The tenancy rule (docs/api.md):

- No key at all: one tenant. Every client shares the responses store and sees every request id on the
  monitoring routes; the server says so when it starts. Loopback only unless --insecure-no-auth.
- ``--api-key KEY``: one tenant behind a key ("default").
- ``--api-keys FILE`` (a JSON object, name -> key): one tenant per key. A stored response (Responses API) is
  visible only to the key that made it: another key's GET, DELETE or ``previous_response_id`` is the same 404
  as an id that never existed.
- ``--admin-key KEY``: the operator. With any key configured, the monitoring routes show request ids only to
  it, and only it may empty the prefix cache (DELETE /v1/edgeopt/cache). It reads no other caller's responses.
- The prefix cache is per caller (:func:`cache_namespace`): a prompt reuses only KV its own key's requests left,
  so ``cached_tokens`` and the time to the first token say nothing of what another key sent. The admin is a
  caller like the others here: its prompts neither read the tenants' cached prefixes nor leave theirs to them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from starlette.requests import HTTPConnection

from edgeopt.engine.api import SHARED_NAMESPACE
from edgeopt.errors import ConfigError

DEFAULT_CALLER = "default"  # the holder of --api-key
ADMIN_CALLER = "admin"  # the holder of --admin-key
_SCOPE_KEY = "edgeopt.caller"


@dataclass(frozen=True)
class Caller:
    name: str
    admin: bool = False


def keyring(api_key: str | None, api_keys: Mapping[str, str], admin_key: str | None) -> dict[bytes, Caller]:
    """Key bytes -> the caller it names; refuses one key given to two callers (it could name either)."""
    pairs = [*(((api_key, Caller(DEFAULT_CALLER)),) if api_key else ()),
             *((key, Caller(name)) for name, key in api_keys.items()),
             *(((admin_key, Caller(ADMIN_CALLER, admin=True)),) if admin_key else ())]
    ring: dict[bytes, Caller] = {}
    for key, caller in pairs:
        raw = key.encode("utf-8")
        if raw in ring:
            raise ConfigError(f"the key of {caller.name!r} is also the key of {ring[raw].name!r}",
                              "give every caller (and the admin) a key of its own")
        ring[raw] = caller
    return ring


def load_api_keys(path: Path) -> dict[str, str]:
    """--api-keys FILE: a JSON object of caller name -> key, e.g. {"kitchen": "k-1...", "alice": "k-2..."}."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"--api-keys {path}: cannot be read as JSON ({exc})",
                          'write a JSON object of caller name -> key: {"alice": "<key>"}') from None
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"--api-keys {path}: holds {type(data).__name__}, not a JSON object of name -> key",
                          'write e.g. {"alice": "<key>", "kitchen": "<key>"}')
    for name, key in data.items():
        if name in (DEFAULT_CALLER, ADMIN_CALLER) or not name:
            raise ConfigError(f"--api-keys {path}: the caller name {name!r} is reserved or empty",
                              f"name callers other than {DEFAULT_CALLER!r} and {ADMIN_CALLER!r}")
        if not isinstance(key, str) or len(key) < 8:
            raise ConfigError(f"--api-keys {path}: the key of {name!r} is not a string of 8 characters or more",
                              "generate keys with e.g. `python -c 'import secrets; print(secrets.token_urlsafe())'`")
    return data


def remember_caller(scope: dict, caller: Caller) -> None:
    """Called by the key guard once a key matched: the routes read the caller back with :func:`caller_of`."""
    scope.setdefault("state", {})[_SCOPE_KEY] = caller


def caller_of(connection: HTTPConnection) -> Caller | None:
    """The caller a request's key names; None when the server has no keys (one tenant)."""
    caller = connection.scope.get("state", {}).get(_SCOPE_KEY)
    return caller if isinstance(caller, Caller) else None


def owner_name(connection: HTTPConnection) -> str | None:
    """What a stored object belongs to: its caller's name (None: the one tenant of a server without keys)."""
    caller = caller_of(connection)
    return None if caller is None else caller.name


def cache_namespace(connection: HTTPConnection) -> str:
    """Whose prefix-cache entries the request may borrow and leaves its KV to: its caller's own; the one shared
    namespace on a server without keys. Prefixed so that no caller name is the engine's shared or operator
    namespace (edgeopt.engine.prefix_tree)."""
    caller = caller_of(connection)
    return SHARED_NAMESPACE if caller is None else f"caller:{caller.name}"


def sees_request_ids(connection: HTTPConnection, keys_configured: bool) -> bool:
    """Request ids on the monitoring routes: for everyone on a keyless server, else for the admin only."""
    caller = caller_of(connection)
    return not keys_configured or (caller is not None and caller.admin)
