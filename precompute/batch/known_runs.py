"""What the store already holds of a model's runs, told without loading the model.

``layerscope sweep plan`` lists runs as done / partial / todo from this, ``sweep run`` skips the
(dataset, model) pairs it finds complete, and ``layerscope precompute`` skips loading (and decoding
for) a model whose runs are all done. One matching rule for all three, so the plan and the run agree.

A planned run matches a stored one when every identity field the config-only probe can know agrees
(dataset, manifest hash, model source and revision, dtype, budgets, variant, caption rules, layer
names of a hidden_states model, ...); the few only a load can tell (native frame count, MLLM prompt,
a hook-path model's layers, a standalone loader's weights digest) are left out of the match. An
MLLM's prompt (in its chat template or bare) is part of its runs' identity: it is read from the
model's processor (tokenizer files, no weights).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import SimpleNamespace

#: identity fields a config-only probe cannot know (the run checks them by its run id after loading)
LOADED_ONLY = ("native_frames",)


@dataclass(frozen=True)
class KnownIdentity:
    info: SimpleNamespace  #: the ``info`` fields :meth:`precompute.batch.runner.Precompute.plan` reads
    fixed: dict  #: identity fields pinned beyond the plan's (``layer_names``: None for a run without them)
    unknown: tuple  #: identity fields only a load can tell
    dims: tuple | None  #: ``(n_layers, dim)`` when the config states them, else None
    #: stands in for the adapter in :meth:`precompute.batch.runner.Precompute.plan`: ``prompt_format(side)``
    adapter: SimpleNamespace


def known_identity(probe) -> KnownIdentity:
    """The identity a config-only adapter (:func:`precompute.adapters.dispatch.probe_model`) pins down."""
    planned = probe.planned_layers()
    hf = hasattr(probe, "config")  # timm / open_clip: revision and pooling come with the weights
    # a --weights file's content hash is known before the load: it is the revision (precompute.adapters.hooked)
    revision = probe.config_revision() if hf else getattr(probe, "file_revision", None)
    info = SimpleNamespace(source=probe.source, revision=revision,
                           modality=probe.modality, pooling=getattr(probe, "pooling", None), native_frames=None,
                           config={})
    unknown = LOADED_ONLY + (() if info.revision else ("revision",)) + (() if info.pooling else ("pooling",))
    adapter = SimpleNamespace(prompt_format=_prompts(probe) if probe.modality == "mllm" else (lambda side: None))
    if planned is None:  # the hook path: its layers (and their names) are known after its probe forward
        return KnownIdentity(info, {}, unknown + ("layer_names",), None, adapter)
    n_layers, dim, names = planned
    if names:
        info.config = {"layerscope": {"layer_names": names}}
    head = _sentence_head(probe) if names else None
    if head is not None:  # the load records it in the run identity (precompute.batch.runner.Precompute.plan)
        info.config["layerscope"]["sentence_transformers"] = head.record()
    return KnownIdentity(info, {"layer_names": names or None}, unknown, (n_layers, dim), adapter)


def _sentence_head(probe):
    """A sentence-transformers folder's head, or None (also for a head the load will refuse)."""
    from ..adapters.sentence_head import HeadError

    try:
        return probe.planned_sentence_head() if hasattr(probe, "planned_sentence_head") else None
    except HeadError:
        return None


def _prompts(probe):
    """``prompt_format(side)`` of an MLLM probe, as its loaded adapter gives it: the processor (no
    weights) is read here when the prompt goes inside its chat template (``prompt_template`` auto)."""
    from ..adapters.hf import MllmAdapter

    shell = MllmAdapter.__new__(MllmAdapter)
    shell.__dict__.update(probe.__dict__)
    shell.__dict__.pop("_prompt_formats", None)
    if probe.prompt_template == "auto":
        from transformers import AutoProcessor

        try:
            shell.processor = AutoProcessor.from_pretrained(probe.source, trust_remote_code=probe.trust,
                                                             **getattr(probe, "hub", {}))
        except Exception:  # the load reports it; meanwhile no stored run matches an unknown prompt
            return lambda side: None
    else:
        shell.processor = None
    return shell.prompt_format


def keep_unknown_revision(known: KnownIdentity, name: str, stored: list[dict], explicit_revision) -> None:
    """Plan a hub model whose stored runs say revision ``unknown`` (made while transformers 5 left
    hub commits unrecorded) with that revision, as :meth:`precompute.batch.runner.Precompute.run_model`
    then runs it, so the plan agrees with the run: only when no ``--revision`` was asked for."""
    info = known.info
    if explicit_revision or not info.revision or info.revision == "unknown":
        return
    if any(r["config"].get("model") == name and r["config"].get("source") == info.source
           and r["config"].get("revision") == "unknown" for r in stored):
        info.revision = "unknown"


def stored_runs(con) -> list[dict]:
    """``[{"run_id", "status", "n_done", "n_items", "config"}]`` of every run in the store (config parsed)."""
    cur = con.execute("SELECT run_id, status, n_done, n_items, config FROM runs")
    cols = [d[0] for d in cur.description]
    rows = [dict(zip(cols, r)) for r in cur.fetchall()]
    for r in rows:
        r["config"] = json.loads(r["config"]) if isinstance(r["config"], str) else (r["config"] or {})
    return rows


def match(plan, known: KnownIdentity, stored: list[dict], n_items: int) -> tuple[int, str]:
    """``(n_done, status)`` of one planned run (:class:`precompute.batch.runner.RunPlan`): the best stored
    run of the same known identity (done first, then the most items), ``status`` done | partial | todo."""
    want = {**{k: v for k, v in plan.identity.items() if k not in known.unknown}, **known.fixed}
    found = [r for r in stored if all(r["config"].get(k) == v for k, v in want.items())]
    best = max(found, key=lambda r: (r["status"] == "done", r["n_done"]), default=None)
    if best is not None and best["status"] == "done":
        return n_items, "done"
    # an unfinished run is not done even when it holds every item (a 0-item shard left "running")
    n_done = min(best["n_done"], n_items) if best else 0
    return n_done, ("partial" if n_done else "todo")
