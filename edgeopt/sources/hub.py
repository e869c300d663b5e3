"""Fetch a model from the Hugging Face hub by id, failing fast and in one line when it cannot.

Offline, huggingface_hub retries each request five times with backoff (~25-40 s of retry paragraphs)
before failing. Edge machines are often offline, so the hub is asked once, quickly, whether it answers
(a TCP connection to the endpoint within :data:`PROBE_SECONDS`); when it does not, or when
``HF_HUB_OFFLINE`` is set, only the local Hugging Face cache is used, and a model missing there is one
error with the fix. A model that was downloaded before keeps working offline.
"""

from __future__ import annotations

import socket
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from edgeopt.errors import MissingDependencyError, ModelNotFoundError

PROBE_SECONDS = 1.5
T = TypeVar("T")


def hub_unreachable_reason(endpoint: str, timeout: float = PROBE_SECONDS) -> str | None:
    """None when ``endpoint`` accepts a TCP connection within ``timeout`` seconds, else why not.

    Behind a proxy (``HTTPS_PROXY`` and friends, as huggingface_hub's HTTP client honours them) the proxy
    is what must answer. Name resolution has no timeout of its own, so the probe runs on a daemon thread
    that is abandoned (not waited for) when it takes too long."""
    host, port = _first_hop(endpoint)
    outcome: list[str | None] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            outcome.append(None)
        except OSError as exc:
            outcome.append(exc.strerror or exc.__class__.__name__)

    thread = threading.Thread(target=probe, name="edgeopt-hub-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    if not outcome:
        return f"no answer within {timeout:g} s"
    return outcome[0]


def _first_hop(url: str) -> tuple[str, int]:
    """The host and port a connection to ``url`` opens: its proxy's, or its own."""
    parts = urlsplit(url)
    host = parts.hostname or url
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if proxy and not urllib.request.proxy_bypass(host):
        return _first_hop_of_proxy(proxy)
    return host, parts.port or (80 if parts.scheme == "http" else 443)


def _first_hop_of_proxy(proxy: str) -> tuple[str, int]:
    parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    return parts.hostname or proxy, parts.port or (443 if parts.scheme == "https" else 80)


def hub_download(model: str, fetch: Callable[..., T], what: str) -> T:
    """Run ``fetch(model, local_files_only=...)`` (``hf_hub_download`` or ``snapshot_download`` with their
    other arguments bound) against the hub when it answers, else against the local cache only;
    ``what`` names the files in messages ("config.json", "the checkpoint")."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return _from_cache(model, fetch, what, "HF_HUB_OFFLINE is set",
                           "unset HF_HUB_OFFLINE on a machine with network, or pass a local checkpoint directory")
    reason = hub_unreachable_reason(constants.ENDPOINT)
    if reason is not None:
        return _from_cache(model, fetch, what, f"cannot reach {constants.ENDPOINT} ({reason})",
                           "connect to the network, or download the model where there is one "
                           f"(hf download {model} --local-dir DIR) and pass DIR")
    try:
        return fetch(model, local_files_only=False)
    except Exception as exc:  # every hub failure becomes one line; --debug shows the chain
        raise _hub_error(model, what, exc) from exc


def _from_cache(model: str, fetch: Callable[..., T], what: str, why: str, fix: str) -> T:
    try:
        return fetch(model, local_files_only=True)
    except Exception as exc:
        raise ModelNotFoundError(f"{why}, and {what} of {model!r} is not in the local Hugging Face cache",
                                 fix) from exc


def _hub_error(model: str, what: str, exc: Exception) -> ModelNotFoundError:
    from huggingface_hub import errors

    if isinstance(exc, errors.GatedRepoError):
        return ModelNotFoundError(f"{model!r} is gated on the hub: its license must be accepted first",
                                  f"accept it at https://huggingface.co/{model}, then run hf auth login")
    if isinstance(exc, errors.RepositoryNotFoundError):
        return ModelNotFoundError(f"no model {model!r} on the hub (or it is private)",
                                  "check the id's spelling; for a private model run hf auth login")
    if isinstance(exc, errors.EntryNotFoundError):
        return ModelNotFoundError(f"{model!r} on the hub has no {what}",
                                  "edgeopt needs a transformers checkpoint (config.json and *.safetensors)")
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return ModelNotFoundError(f"could not fetch {what} of {model!r}: {exc.__class__.__name__}: {first_line[:200]}",
                              "check the hub id and your network, or download the model and pass its directory")


def fetch_config(model: str) -> Path:
    """The local path of ``model``'s config.json (downloaded, or from the cache)."""
    hf_hub_download = _hub_function("hf_hub_download")
    return Path(hub_download(model, lambda repo, **kw: hf_hub_download(repo, "config.json", **kw), "config.json"))


def fetch_checkpoint(model: str, allow_patterns: list[str]) -> Path:
    """The local snapshot directory of ``model`` holding the files matching ``allow_patterns``."""
    snapshot_download = _hub_function("snapshot_download")
    return Path(hub_download(model, lambda repo, **kw: snapshot_download(repo, allow_patterns=allow_patterns, **kw),
                             "the checkpoint"))


def _hub_function(name: str) -> Any:
    try:
        import huggingface_hub
    except ImportError as exc:  # the serve-only install has no hub client
        raise MissingDependencyError("fetching a model from the hub needs huggingface_hub",
                                     "pip install 'edgeopt[optimize]'") from exc
    return getattr(huggingface_hub, name)
