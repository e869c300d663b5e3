"""The engine's inbox: what other threads ask of the engine thread, one small dataclass per kind (as
llama.cpp's server has one task type per kind), so the thread dispatches on the type and nothing is cast.

Server threads only append commands; the engine thread drains them between two steps, when the scheduler,
the prefix cache and the runtime are its own to touch.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, Union

if TYPE_CHECKING:
    from edgeopt.engine.outputs import RequestTracker
    from edgeopt.engine.scheduler import Scheduler

T = TypeVar("T")

@dataclass(frozen=True)
class AddRequest:
    """A validated request, registered already; the scheduler takes its sequence."""

    tracker: RequestTracker


@dataclass(frozen=True)
class AbortRequest:
    """The client went away (or the caller gave up): end the request with "abort", freeing its KV."""

    request_id: str


@dataclass(frozen=True)
class BetweenSteps(Generic[T]):
    """Work on the scheduler that must not race a step (evicting the prefix cache, adopting a saved prefix);
    its result, or what it raised, goes to ``done``."""

    work: Callable[[Scheduler], T]
    done: concurrent.futures.Future[T]


EngineCommand = Union[AddRequest, AbortRequest, BetweenSteps[Any]]
