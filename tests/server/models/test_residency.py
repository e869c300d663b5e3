"""The residency's rules with models that load instantly: admitted by bytes, least recently used unloaded
first, never a model with requests in flight or a pinned one, keep-alive, failed loads and models too large."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from edgeopt.errors import ModelNameError, NotReadyError
from edgeopt.server.models import residency as residency_module
from edgeopt.server.models.catalog import ModelCatalog, ModelEntry, ModelNeed
from edgeopt.server.models.errors import ModelBusyError, ModelTooLargeError
from edgeopt.server.models.residency import ModelEvents, Residency
from edgeopt.server.served_model import ServedModel

MIB = 2**20


@dataclass
class Loads:
    """What the fake loader did: models loaded (with the bytes given) and closed, in order."""

    loaded: list[tuple[str, int]] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)
    fail: set[str] = field(default_factory=set)


class _Closing:
    def __init__(self, name: str, loads: Loads) -> None:
        self.name, self.loads = name, loads

    def close(self) -> None:
        self.loads.closed.append(self.name)


def entry(name: str, loads: Loads, full: int, least: int | None = None, refusal: str | None = None) -> ModelEntry:
    def load(room: int) -> ServedModel:
        if name in loads.fail:
            raise RuntimeError(f"{name} is corrupt")
        loads.loaded.append((name, room))
        return ServedModel(context_length=64, tokenizer=None, embedder=_Closing(name, loads))  # type: ignore[arg-type]

    return ModelEntry(name=name, kind="embedding", need=ModelNeed(full, full if least is None else least), load=load,
                      aliases=(f"{name}-alias",), refusal=refusal)


def residency(loads: Loads, *entries_: ModelEntry, budget: int = 200 * MIB, **kwargs) -> Residency:
    events: list[tuple[str, str]] = []
    made = Residency(ModelCatalog(entries_), budget, events=ModelEvents(counted=lambda m, e: events.append((m, e))),
                     **kwargs)
    made.events_seen = events  # type: ignore[attr-defined]
    return made


def run(coro):  # noqa: ANN001, ANN201
    return asyncio.run(coro)


def test_models_load_by_bytes_and_the_least_recently_used_idle_one_makes_room():
    loads = Loads()
    a, b, c = entry("a", loads, 80 * MIB), entry("b", loads, 80 * MIB), entry("c", loads, 80 * MIB)
    models = residency(loads, a, b, c)

    async def go() -> None:
        for e in (a, b):
            (await models.acquire(e)).release()
        (await models.acquire(a)).release()  # a is now used more recently than b
        (await models.acquire(c)).release()
        assert set(models.loaded) == {"a", "c"}
        assert models.used_bytes <= models.budget_bytes

    run(go())
    assert loads.closed == ["b"]
    assert ("b", "unloads") in models.events_seen and ("c", "loads") in models.events_seen


def test_a_model_with_requests_in_flight_is_never_unloaded_and_a_new_one_waits_for_it(monkeypatch):
    monkeypatch.setattr(residency_module, "BUSY_WAIT_S", 5.0)
    loads = Loads()
    a, b = entry("a", loads, 150 * MIB), entry("b", loads, 150 * MIB)
    models = residency(loads, a, b)

    async def go() -> None:
        held = await models.acquire(a)
        waiting = asyncio.create_task(models.acquire(b))
        await asyncio.sleep(0.2)
        assert not waiting.done() and "a" in models.loaded and loads.closed == []
        held.release()  # a is idle now: b takes its room
        (await asyncio.wait_for(waiting, 5)).release()
        assert list(models.loaded) == ["b"]

    run(go())
    assert loads.closed == ["a"]


def test_when_every_other_model_stays_busy_the_wait_ends_in_a_503(monkeypatch):
    monkeypatch.setattr(residency_module, "BUSY_WAIT_S", 0.3)
    loads = Loads()
    a, b = entry("a", loads, 150 * MIB), entry("b", loads, 150 * MIB)
    models = residency(loads, a, b)

    async def go() -> None:
        held = await models.acquire(a)
        with pytest.raises(NotReadyError, match="'b' needs 150 MiB and every loaded model is busy"):
            await models.acquire(b)
        held.release()

    run(go())


def test_a_pinned_model_stays_and_the_model_that_does_not_fit_beside_it_is_refused():
    loads = Loads()
    a, b = entry("a", loads, 150 * MIB), entry("b", loads, 150 * MIB)
    models = residency(loads, a, b, pins=frozenset({"a"}))

    async def go() -> None:
        await models.load(a, pinned=True)
        with pytest.raises(NotReadyError, match="busy or pinned"):
            await models.load(b)

    run(go())
    assert loads.closed == []


def test_a_model_is_loaded_smaller_where_less_than_its_full_size_is_free_but_never_below_its_least():
    loads = Loads()
    a, b = entry("a", loads, 120 * MIB), entry("b", loads, 120 * MIB, least=60 * MIB)
    models = residency(loads, a, b)

    async def go() -> None:
        (await models.acquire(a)).release()
        (await models.acquire(b)).release()

    run(go())
    assert loads.loaded == [("a", 120 * MIB), ("b", 80 * MIB)] and loads.closed == []


def test_keep_alive_unloads_an_idle_model_and_zero_unloads_it_when_its_request_ends(monkeypatch):
    monkeypatch.setattr(residency_module, "REAP_INTERVAL_S", 0.05)
    loads = Loads()
    a, b = entry("a", loads, 50 * MIB), entry("b", loads, 50 * MIB)
    models = residency(loads, a, b, keep_alive_s=0.2)

    async def go() -> None:
        models.start()
        lease = await models.acquire(a)
        lease.keep_alive_s = 0  # Ollama's keep_alive 0
        lease.release()
        await asyncio.sleep(0.05)
        assert "a" not in models.loaded
        (await models.acquire(b)).release()
        await asyncio.sleep(0.1)
        assert "b" in models.loaded  # within its keep-alive
        await asyncio.sleep(0.4)
        assert "b" not in models.loaded
        await models.close()

    run(go())
    assert loads.closed == ["a", "b"]


def test_unloading_a_busy_model_is_a_409_and_an_idle_one_goes():
    loads = Loads()
    a = entry("a", loads, 50 * MIB)
    models = residency(loads, a)

    async def go() -> None:
        lease = await models.acquire(a)
        with pytest.raises(ModelBusyError, match="1 request"):
            await models.unload("a", "asked")
        lease.release()
        assert await models.unload("a", "asked")
        assert not await models.unload("a", "asked")  # not loaded: nothing to do

    run(go())


def test_a_failed_load_is_that_models_503_and_the_others_keep_serving():
    loads = Loads(fail={"bad"})
    good, bad = entry("good", loads, 50 * MIB), entry("bad", loads, 50 * MIB)
    models = residency(loads, good, bad)

    async def go() -> None:
        with pytest.raises(NotReadyError, match="'bad' failed to load: bad is corrupt"):
            await models.acquire(bad)
        with pytest.raises(NotReadyError, match="failed to load"):  # remembered: not tried again at once
            await models.acquire(bad)
        (await models.acquire(good)).release()

    run(go())
    assert loads.loaded == [("good", 50 * MIB)]


def test_a_model_larger_than_the_whole_budget_is_refused_naming_its_bytes():
    loads = Loads()
    big = entry("big", loads, 300 * MIB, refusal="model 'big' needs 300 MiB at least; the budget is 200 MiB")
    models = residency(loads, big)
    with pytest.raises(ModelTooLargeError, match="300 MiB"):
        run(models.acquire(big))
    assert loads.loaded == []


def test_names_aliases_tags_and_unknown_names():
    loads = Loads()
    catalog = ModelCatalog([entry("smollm2", loads, 1), entry("minilm", loads, 1)])
    assert catalog.resolve("smollm2").name == "smollm2"
    assert catalog.resolve("minilm-alias").name == "minilm"
    assert catalog.resolve("smollm2:latest").name == "smollm2"  # Ollama's name:tag
    assert catalog.resolve("SmolLM2").name == "smollm2"
    assert catalog.resolve(None).name == "smollm2"  # a request that names none: the first
    with pytest.raises(ModelNameError, match="'gemma3' not found: this server serves 'smollm2', 'minilm'"):
        catalog.resolve("gemma3")


class _DeferringRuntime:
    """A runtime that left work for after its model serves (llama.cpp: the attention timing)."""

    def __init__(self, fails: bool) -> None:
        self.fails, self.ready_calls = fails, 0

    def after_ready(self) -> None:
        self.ready_calls += 1
        if self.fails:
            raise RuntimeError("the background timing could not start")

    def close(self) -> None:
        pass


def test_a_loaded_model_is_told_it_serves_and_deferred_work_that_fails_never_costs_the_model():
    runtimes = {"a": _DeferringRuntime(fails=False), "b": _DeferringRuntime(fails=True)}

    def deferring(name: str) -> ModelEntry:
        def load(room: int) -> ServedModel:
            assert runtimes[name].ready_calls == 0
            return ServedModel(context_length=64, tokenizer=None, runtime=runtimes[name])  # type: ignore[arg-type]

        return ModelEntry(name=name, kind="causal-lm", need=ModelNeed(MIB, MIB), load=load)

    models = Residency(ModelCatalog((deferring("a"), deferring("b"))), 10 * MIB)

    async def go() -> None:
        for name in ("a", "b"):
            (await models.acquire(models.catalog.resolve(name))).release()
        assert set(models.loaded) == {"a", "b"}

    run(go())
    assert runtimes["a"].ready_calls == runtimes["b"].ready_calls == 1


class _Kept:
    """Kept memory as the residency sees it (edgeopt.server.models.kept): bytes by file, freed oldest first."""

    def __init__(self, held: dict[str, int]) -> None:
        self.held, self.freed = dict(held), []

    def held_bytes(self, path=None) -> int:
        return sum(b for p, b in self.held.items() if path is None or str(path).endswith(p))

    def release_oldest(self, spare=None) -> int:
        for p in list(self.held):
            if spare is None or not str(spare).endswith(p):
                self.freed.append(p)
                return self.held.pop(p)
        return 0

    def release_all(self) -> None:
        while self.release_oldest():
            pass


def kept_entry(name: str, loads: Loads, full: int, tmp_path) -> ModelEntry:
    from types import SimpleNamespace

    made = entry(name, loads, full)
    return ModelEntry(name=made.name, kind=made.kind, need=made.need, load=made.load, bundle_dir=tmp_path,
                      manifest=SimpleNamespace(model_file=f"{name}.gguf"))  # type: ignore[arg-type]


def test_kept_memory_counts_in_the_budget_and_goes_before_any_loaded_model_but_never_the_one_loading(tmp_path):
    loads = Loads()
    a, b, c = (kept_entry(n, loads, 80 * MIB, tmp_path) for n in ("a", "b", "c"))
    kept = _Kept({"old.gguf": 30 * MIB, "c.gguf": 30 * MIB})  # oldest first
    models = residency(loads, a, b, c, budget=200 * MIB, kept=kept)

    async def go() -> None:
        (await models.acquire(a)).release()  # 80 + 60 kept: fits
        assert kept.freed == [] and models.used_bytes == 140 * MIB
        (await models.acquire(b)).release()  # 160 + 60 > 200: the oldest kept goes, not a
        assert kept.freed == ["old.gguf"] and set(models.loaded) == {"a", "b"}
        # c's own kept bytes are room for c (its load takes them back); still short: a unloads, c's stays kept
        (await models.acquire(c)).release()
        assert kept.freed == ["old.gguf"] and set(models.loaded) == {"b", "c"}

    run(go())
    assert loads.closed == ["a"]
