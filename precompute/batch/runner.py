"""Plan and execute precompute runs: model × setting × variant, resumable batch by batch."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from dataclasses import dataclass, field

import numpy as np

from .. import __version__
from ..inputs.manifest import Manifest
from .options import DEFAULTS, PrecomputeOptions
from ..adapters.hf import Adapter, ModelError, default_name, store_name
from ..adapters.dispatch import load_adapter, probe_model
from ..inputs.video import DecodedVideo, read_video, sample_indices
from .writer import StoreWriter, run_id_for

#: Bumped when extraction changes numbers for the same inputs (part of every run id).
EXTRACTION_VERSION = 1


@dataclass
class RunPlan:
    run_id: str
    n_frames: int | None
    n_captions: int | None
    variant: str
    identity: dict
    state: dict = field(default_factory=dict)
    batch: int = 8
    #: the items the run embeds (set by :meth:`Precompute.run_model`; see :meth:`Precompute.run_items`)
    items: list = field(default_factory=list)


@dataclass
class Summary:
    runs_done_before: int = 0
    runs_computed: int = 0
    items_embedded: int = 0
    runs_skipped: list = field(default_factory=list)
    seconds: float = 0.0


_batches_committed = 0


def _crash_point() -> None:
    """Crash-test hook: with LAYERSCOPE_KILL_AFTER_BATCHES=N the process SIGKILLs itself after N
    committed batches, so the resume tests interrupt a real run at a known point."""
    global _batches_committed
    limit = os.environ.get("LAYERSCOPE_KILL_AFTER_BATCHES")
    if limit is None:
        return
    _batches_committed += 1
    if _batches_committed >= int(limit):
        os.kill(os.getpid(), signal.SIGKILL)


class FrameCache:
    """Decoded videos kept across the runs of one invocation (a sweep decodes each video once).

    ``wanted(T)`` names the frames any run of the invocation samples from a T-frame video; only
    those are kept. Bounded by ``budget_bytes``; the oldest entries go first. Used from the
    prefetch worker only.
    """

    def __init__(self, wanted=None, budget_bytes: int = 1 << 30):
        from collections import OrderedDict

        self.wanted = wanted
        self.budget = budget_bytes
        self.used = 0
        self.entries: "OrderedDict[str, DecodedVideo]" = OrderedDict()

    def get(self, path: str) -> DecodedVideo:
        if path in self.entries:
            self.entries.move_to_end(path)
            return self.entries[path]
        video = read_video(path, self.wanted)
        video.frames.setflags(write=False)  # shared between runs: nobody may modify it
        self.entries[path] = video
        self.used += video.nbytes
        while self.used > self.budget and len(self.entries) > 1:
            _, old = self.entries.popitem(last=False)
            self.used -= old.nbytes
        return video


def parse_shard(text: str | None, n_items: int, batch_size: int = 1) -> tuple[int, int, range]:
    """``(I, N, items)`` of ``--shard I/N``: shard I's contiguous manifest positions.

    Shards split the manifest on whole batches of ``batch_size``, so every item is embedded in the
    same batch (same companions, same padding) as in an unsharded run: a forward's numbers can
    depend on the batch's make-up in the last bits (CPU GEMM blocking varies with the batch size),
    and merged shards must equal the unsharded run bitwise."""
    if not text:
        return 0, 1, range(n_items)
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard must look like I/N (e.g. 0/4), got {text!r}") from None
    if n < 1 or not 0 <= i < n:
        raise ValueError(f"--shard {text}: need 0 <= I < N")
    per = math.ceil(math.ceil(n_items / batch_size) / n) * batch_size  # items per shard, whole batches
    return i, n, range(min(n_items, i * per), min(n_items, (i + 1) * per))


#: How several captions (n_c > 1) become one string: each caption as a sentence (a full stop added
#: where it has no end punctuation), joined by one space. n_c = 1 is the caption exactly as written.
CAPTION_SEPARATOR = " "
#: Version of the caption-to-text rule, part of every caption run's identity (2: n_c = 1 verbatim)
CAPTION_TEXT_VERSION = 2
#: Largest --frames value: beyond it the sampled index list alone would be gigabytes
MAX_FRAMES = 4096


def caption_text(captions: list[str], n_c: int) -> str:
    """The string a text model sees for ``captions`` (already chosen and ordered) at ``n_c``.

    ``n_c = 1``: the first caption verbatim (DR's protocol). ``n_c > 1``: the first ``n_c`` captions,
    each ending in ``.``, ``!`` or ``?`` (a full stop is added otherwise), joined by
    :data:`CAPTION_SEPARATOR`.
    """
    chosen = captions[:n_c]
    if len(chosen) == 1:
        return chosen[0]
    return CAPTION_SEPARATOR.join(c if c.endswith((".", "!", "?")) else c + "." for c in chosen)


def caption_order(captions: list[str], item_id: str, order: str, seed: int) -> list[str]:
    """The item's captions in the order runs take them from: ``first`` keeps the manifest order;
    ``random`` is a permutation seeded by ``(seed, item_id)`` (so the first ``n_c`` of it is a
    seeded random subset, nested across ``n_c`` and the same on every rerun or shard)."""
    if order == "first":
        return list(captions)
    if order != "random":
        raise ValueError(f"--caption-order must be first or random, got {order!r}")
    key = int.from_bytes(hashlib.sha256(f"{seed}\0{item_id}".encode()).digest()[:8], "little")
    perm = np.random.default_rng(key).permutation(len(captions))
    return [captions[i] for i in perm]


def frames_wanted(n_total: int, frames, variants) -> np.ndarray:
    """Every frame number a run with budgets ``frames`` and ``variants`` samples from a video of
    ``n_total`` frames (what a :class:`FrameCache` keeps)."""
    picked = np.unique(np.concatenate([sample_indices(n_total, n_f) for n_f in frames] or [[0]]))
    if "reversed" in variants:  # the reversed video's frame i is frame T-1-i
        picked = np.union1d(picked, n_total - 1 - picked)
    return picked


class Precompute:
    """One precompute invocation over one dataset and several models."""

    def __init__(self, writer: StoreWriter, manifest: Manifest, dataset: str, *,
                 options: PrecomputeOptions = DEFAULTS, progress=True, out=None):
        self.w = writer
        self.manifest = manifest
        self.dataset = dataset
        #: what the job is asked (budgets, variants, device, model flags): read from here, never copied
        self.options = options
        self.progress = progress
        #: hub models: which revision, and where the hub's files are cached (from_pretrained's own keywords)
        self.hub = {k: v for k, v in (("revision", options.revision), ("cache_dir", options.cache_dir)) if v}
        self.out = out or sys.stderr  # resolved at call time, so redirected stderr is honoured
        self.summary = Summary()
        self.frames_cache = FrameCache(self._wanted_frames)
        # one worker thread for decoding and preprocessing: the frame cache is only touched there
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="layerscope-prepare")
        if options.batch_size < 1:
            raise ValueError(f"--batch-size must be >= 1, got {options.batch_size}")
        if options.frames and max(options.frames) > MAX_FRAMES:
            raise ValueError(f"--frames {max(options.frames)}: at most {MAX_FRAMES} frames per video "
                             "(more than a video holds only repeats frames)")
        if options.caption_order not in ("first", "random"):
            raise ValueError(f"--caption-order must be first or random, got {options.caption_order!r}")
        if options.prompt_template not in ("auto", "none"):
            raise ValueError(f"--prompt-template must be auto or none, got {options.prompt_template!r}")
        self.shard_i, self.shard_n, self.items_range = parse_shard(options.shard, len(manifest.items),
                                                                   options.batch_size)

    def close(self) -> None:
        """Stop the prefetch worker (and a backend's workers); the job cannot run after this."""
        self.pool.shutdown(wait=True, cancel_futures=True)

    def _wanted_frames(self, n_total: int) -> np.ndarray:
        return frames_wanted(n_total, self.options.frames, self.options.variants)

    def check_captions(self, asked_by: str | None = None, fix=None):
        """Only relevant when a text or MLLM model is in the call; run before any model runs.

        ``asked_by``: what set the caption budgets, as the error names it (default: the ``--captions``
        flag, or the default budgets when they are the defaults, which a user who never passed
        ``--captions`` did not choose); ``fix(fewest)``: how to lower them (default: the flags)."""
        need = max(self.options.captions) if self.options.captions else 0
        short = [(it.item_id, len(it.captions)) for it in self.manifest.items if len(it.captions) < need]
        if short and not self.options.allow_fewer_captions:
            listed = ", ".join(f"{i} ({n})" for i, n in short[:10]) + (" ..." if len(short) > 10 else "")
            budgets = ",".join(map(str, self.options.captions))
            if asked_by is None:
                asked_by = (f"the default --captions {budgets} (used when --captions is not given)"
                            if self.options.captions == DEFAULTS.captions else f"--captions {budgets}")
            fix = fix or (lambda fewest: (
                f"Pass --captions with values up to {fewest} (e.g. --captions {','.join(map(str, range(1, fewest + 1)))}), "
                "or --allow-fewer-captions to use all of an item's captions when it has fewer (recorded in each "
                "run's notes)."))
            raise ValueError(f"{asked_by} asks for up to {need} captions but {len(short)} item(s) have fewer: "
                             f"{listed}. {fix(min(n for _, n in short))}")

    # ---- planning ----------------------------------------------------------------------
    def plan(self, adapter: Adapter, name: str, info) -> list[RunPlan]:
        plans = []
        base = {
            "model": name, "source": info.source, "revision": info.revision, "dataset": self.dataset,
            "manifest_sha": self.manifest.sha, "modality": info.modality, "pooling": info.pooling,
            "dtype": self.options.dtype, "extraction": EXTRACTION_VERSION,
            "shard": None if self.shard_n == 1 else f"{self.shard_i}/{self.shard_n}",
        }
        if self.options.blocks:  # another block list is another set of layers
            base["blocks"] = self.options.blocks
        if info.config.get("layerscope", {}).get("layer_names"):  # named layers after the numbered ones
            base["layer_names"] = info.config["layerscope"]["layer_names"]
        if info.config.get("layerscope", {}).get("sentence_transformers"):
            # a sentence-transformers head makes default what encode() returns: another
            # default than a store made before it was read, so another run, not a resumed one
            base["sentence_transformers"] = info.config["layerscope"]["sentence_transformers"]
        if info.modality in ("video", "image"):
            for variant in self.options.variants:
                for n_f in self.options.frames:
                    ident = {**base, "n_frames": n_f, "variant": variant,
                             "image_mode": self.options.image_mode if info.modality == "image" else None,
                             "native_frames": info.native_frames}
                    plans.append(RunPlan(run_id_for(ident), n_f, None, variant, ident))
        elif info.modality == "text":
            if self.options.variants == ("reversed",):  # text has no reversed variant: nothing to do
                return plans
            for n_c in self.options.captions:
                ident = {**base, "n_captions": n_c, "variant": "original", **self._caption_identity()}
                plans.append(RunPlan(run_id_for(ident), None, n_c, "original", ident))
            if any(it.negatives for it in self.manifest.items):
                # the reorder-negative probe needs each item's first negative caption embedded
                ident = {**base, "n_captions": 1, "variant": "negative"}
                plans.append(RunPlan(run_id_for(ident), None, 1, "negative", ident))
            if self.manifest.items and self.manifest.items[0].long_caption:
                # DR Fig. 8's baseline: the long original caption, a run of its own (every item has one)
                ident = {**base, "n_captions": 1, "variant": "long_caption"}
                plans.append(RunPlan(run_id_for(ident), None, 1, "long_caption", ident))
        elif info.modality == "mllm":  # one model, both sides: video runs and caption runs
            for variant in self.options.variants:
                for n_f in self.options.frames:
                    ident = {**base, "n_frames": n_f, "variant": variant, "side": "video",
                             "prompt": adapter.prompt_format("video")}
                    plans.append(RunPlan(run_id_for(ident), n_f, None, variant, ident))
            if self.options.variants == ("reversed",):  # reversed videos only: captions are not reversed
                return plans
            for n_c in self.options.captions:
                ident = {**base, "n_captions": n_c, "variant": "original", "side": "text",
                         "prompt": adapter.prompt_format("text"), **self._caption_identity()}
                plans.append(RunPlan(run_id_for(ident), None, n_c, "original", ident))
            if any(it.negatives for it in self.manifest.items):
                ident = {**base, "n_captions": 1, "variant": "negative", "side": "text",
                         "prompt": adapter.prompt_format("text")}
                plans.append(RunPlan(run_id_for(ident), None, 1, "negative", ident))
            if self.manifest.items and self.manifest.items[0].long_caption:
                ident = {**base, "n_captions": 1, "variant": "long_caption", "side": "text",
                         "prompt": adapter.prompt_format("text")}
                plans.append(RunPlan(run_id_for(ident), None, 1, "long_caption", ident))
        else:
            raise ModelError(f"{name}: no run plan for modality {info.modality!r}")
        return plans

    def _caption_identity(self) -> dict:
        """Identity fields of a caption run: the caption-to-text rule and the caption order (with
        its seed when random), so another order is another run and the same order resumes."""
        ident = {"caption_text": CAPTION_TEXT_VERSION, "caption_order": self.options.caption_order}
        if self.options.caption_order == "random":
            ident["caption_seed"] = self.options.caption_seed
        return ident

    # ---- execution ---------------------------------------------------------------------
    #: decode the first batch in the prefetch thread while the model loads (a Ray driver does not)
    prefetch_first = True

    def adapter_options(self, modality: str | None) -> dict:
        """The keywords of :func:`load_adapter` and :func:`probe_model` for this job's options."""
        o = self.options
        return {"device": o.device, "dtype": o.dtype, "trust_remote_code": o.trust_remote_code, "modality": modality,
                "prompt_template": o.prompt_template, "blocks": o.blocks, "random_init": o.random_init,
                "named_layers": o.named_layers, "hub": self.hub, "prompt": o.prompt, "weights": o.weights}

    def load_model(self, spec: str, modality: str | None):
        """The adapter the runs of ``spec`` use: loaded here (a Ray job returns a proxy of a remote
        actor instead; :meth:`run_model` needs ``info()``, ``prompt_format(side)`` and ``device``)."""
        return load_adapter(spec, **self.adapter_options(modality))

    def probe(self, spec: str, modality: str | None):
        """The config-only adapter of ``spec`` with this job's options (no weights)."""
        return probe_model(spec, **self.adapter_options(modality))

    def all_done(self, probe, name: str) -> int:
        """The number of this model's planned runs when the store holds every one of them done (told
        from the config alone, by the rule ``sweep plan`` uses: :mod:`precompute.batch.known_runs`), else 0."""
        from .known_runs import keep_unknown_revision, known_identity, match, stored_runs

        known = known_identity(probe)
        stored = stored_runs(self.w.con)
        keep_unknown_revision(known, name, stored, self.hub.get("revision"))
        plans = self.plan(known.adapter, name, known.info)
        items = [self.manifest.items[i] for i in self.items_range]
        done = plans and all(match(p, known, stored, len(self.run_items(p, items)))[1] == "done" for p in plans)
        return len(plans) if done else 0

    def run_model(self, spec: str, name: str | None = None, modality: str | None = None,
                  spec_modality: str | None = None, probe=None) -> None:
        """Every run of one model: skipped before loading when the store holds them all, else the model
        loads and its missing runs are computed (unfinished ones resume). ``probe``: its config-only
        adapter when the caller has one (:meth:`probe` otherwise)."""
        if spec_modality == "text" and self.options.variants == ("reversed",):
            # said and done: no model load, no runs
            print(f"note: {name or default_name(spec)} is a text model; text has no reversed variant, "
                  "nothing to do for it", file=self.out)
            return
        probe = probe or self.probe(spec, modality)
        name = store_name(spec, name, self.options.random_init)
        n_done = self.all_done(probe, name)
        if n_done:  # a rerun of a finished job: no weights loaded, no video decoded
            self.summary.runs_done_before += n_done
            print(f"{name}: all {n_done} run(s) already done, skipped", file=self.out)
            return
        if spec_modality in ("video", "image", "mllm") and self.options.frames and self.prefetch_first:
            # decode the first batch's videos while the model loads (the worker is otherwise idle)
            first = [self.manifest.items[i].video for i in self.items_range[:self.options.batch_size]]
            self.pool.submit(lambda: [self.frames_cache.get(v) for v in first])
        adapter = self.load_model(spec, modality)
        info = pinned_revision(adapter.info(), probe)
        stored = self.w.moved_from(name, info)
        if stored is not None:  # the folder moved: same content hash, so the same model and runs
            print(f"note: {name}: {info.source} holds the same weights (revision {info.revision}) as {stored}, "
                  "where its runs were made; they are used as its runs (done ones skipped, unfinished ones "
                  "resumed)", file=sys.stderr)
            info = dataclasses.replace(info, source=stored)
        if not self.hub.get("revision") and self.w.stored_without_commit(name, info):
            # its runs' identities hold "unknown": keep it, or every stored run would be computed again
            print(f"note: {name} is stored without its hub commit (revision unknown); its runs are used as they "
                  f"are (the files loaded now are commit {info.revision}). To pin the commit: `layerscope runs rm "
                  f"--store STORE --model {name}` and precompute again", file=sys.stderr)
            info = dataclasses.replace(info, revision="unknown")
        self.w.put_model(name, info)
        plans = self.plan(adapter, name, info)
        items = [self.manifest.items[i] for i in self.items_range]
        pending = []
        self._note_runs_without_names(name, plans)
        for p in plans:
            p.items = self.run_items(p, items)
            existing = self.w.get_run(p.run_id)
            if existing and existing["status"] == "done":
                self.summary.runs_done_before += 1
                continue
            if not p.items:
                self.summary.runs_computed += 1
            # an MLLM embeds both sides in one space: its runs are video runs and text runs
            run_modality = info.modality if info.modality != "mllm" else ("video" if p.n_frames else "text")
            p.state = self.w.start_run(
                p.run_id, model=name, dataset=self.dataset, modality=run_modality, n_frames=p.n_frames,
                n_captions=p.n_captions, variant=p.variant,
                image_mode=self.options.image_mode if info.modality == "image" else None, pooling=info.pooling,
                dtype=self.options.dtype, device=str(adapter.device), n_items=len(p.items), n_layers=info.n_layers,
                dim=info.dim, config=run_config(p.identity, {**adapter.run_config(), "batch_size": self.options.batch_size,
                                                             "code_version": __version__,
                                                             "device": str(adapter.device)}),
            )
            # resume with the batch size the run started with, so batch boundaries (and with them
            # every float) match an uninterrupted run
            cfg = p.state["config"]
            cfg = json.loads(cfg) if isinstance(cfg, str) else (cfg or {})
            p.batch = int(cfg.get("batch_size", self.options.batch_size))
            if p.items:
                pending.append(p)
        if not items:
            # more shards than items: this shard's runs hold nothing and are done (start_run marks
            # a run of 0 items done), so `layerscope merge` sees every shard finished
            print(f"note: shard {self.shard_i}/{self.shard_n} of {len(self.manifest.items)} item(s) holds no "
                  f"items; {name}'s {len(plans)} run(s) recorded as done with 0 items", file=self.out)
            return
        if not pending:
            print(f"{name}: all {len(plans)} run(s) already done, skipped", file=self.out)
            return
        self._execute(adapter, name, info, pending, items)

    def _batches(self, name, pending, items, suffix=""):
        """``(tasks, notes, bar)`` of an execution: every batch ``(plan, b0, items)`` of every pending
        run, in order (the order and composition every backend keeps, so the vectors are the same
        bitwise), each run's notes so far (the items it leaves out), and the progress bar. Each run
        batches its own :attr:`RunPlan.items` (``items``, the shard's, is kept for subclasses);
        ``n_done`` counts the run's own items."""
        from tqdm.auto import tqdm

        total = sum(len(p.items) - p.state["n_done"] for p in pending)
        bar = tqdm(total=total, desc=f"{name}{suffix}", unit="item", disable=not self.progress, file=self.out,
                   dynamic_ncols=True)
        tasks = [(p, b0, p.items[b0:b0 + p.batch]) for p in pending
                 for b0 in range(p.state["n_done"], len(p.items), p.batch)]
        return tasks, {p.run_id: self._left_out(p, items) for p in pending}, bar

    @staticmethod
    def run_items(p: RunPlan, items: list) -> list:
        """The items run ``p`` embeds: all of ``items``, except that a negative run takes only those
        with a negative caption (embedding another caption in its place would pass it off as one)."""
        return [it for it in items if it.negatives] if p.variant == "negative" else list(items)

    @staticmethod
    def _left_out(p: RunPlan, items: list) -> dict:
        """Notes naming the items of ``items`` that run ``p`` leaves out (recorded with its first batch)."""
        kept = {it.idx for it in p.items}
        out = {it.item_id: {"handled": "left out of the negative run: the item has no negative caption"}
               for it in items if it.idx not in kept}
        return {"no_negative": out} if out else {}

    def _commit(self, name, p, b0, batch, items, vectors, notes, bar, *batch_notes) -> None:
        """Write one batch's vectors (one transaction: a killed job keeps every earlier batch),
        after merging its notes into the run's and checking the numbers; close the run at its end.
        ``items``: the shard's (the run writes its own, ``p.items``, at their manifest positions)."""
        run_notes = notes[p.run_id]
        for more in batch_notes:
            for kind, entries in more.items():
                run_notes.setdefault(kind, {}).update(entries)
        self._check_finite(vectors, name, p, batch)
        self.w.write_batch(p.run_id, batch[0].idx, vectors, n_done=b0 + len(batch), n_items=len(p.items),
                           idx=[it.idx for it in batch],
                           notes=run_notes or None)
        self.summary.items_embedded += len(batch)
        bar.update(len(batch))
        _crash_point()
        if b0 + len(batch) >= len(p.items):
            self._finished(name, p, run_notes, bar)

    def _note_runs_without_names(self, name, plans) -> None:
        """Say so when the store holds a run of the same setting without named layers (made before
        they were stored by default, or with --no-named-layers): it is left as it is, and this
        setting's run with them is another run (analysis uses the newest done run of a setting)."""
        legacy = []
        for p in plans:
            if "layer_names" not in p.identity:
                continue
            old = self.w.get_run(run_id_for({k: v for k, v in p.identity.items() if k != "layer_names"}))
            if old is not None and self.w.get_run(p.run_id) is None:
                legacy.append(self.label(p))
        if legacy:
            print(f"note: {name}: the store holds {len(legacy)} run(s) of these settings without the named layers "
                  f"(default/joint): {', '.join(legacy)}; they are kept, and the runs with them are computed "
                  "(--no-named-layers would reuse or resume the old ones instead)", file=self.out)

    def _execute(self, adapter, name, info, pending, items):
        tasks, notes, bar = self._batches(name, pending, items)
        # a worker decodes, samples and preprocesses batch i+1 while the model runs batch i (on a
        # GPU box the forward is fast and the CPU work would otherwise sit between batches); one
        # batch ahead, so memory stays at two batches of inputs
        pool, ahead = self.pool, None
        try:
            ahead = pool.submit(self._prepare, adapter, tasks[0][0], tasks[0][2]) if tasks else None
            for t, (p, b0, batch) in enumerate(tasks):
                if b0 == p.state["n_done"]:
                    bar.set_postfix_str(self.label(p))
                prepared, batch_notes = ahead.result()
                ahead = (pool.submit(self._prepare, adapter, tasks[t + 1][0], tasks[t + 1][2])
                         if t + 1 < len(tasks) else None)
                self._commit(name, p, b0, batch, items, adapter.run(prepared), notes, bar, batch_notes)
        finally:
            if ahead is not None:
                ahead.cancel()
            bar.close()

    def _finished(self, name, p, notes, bar):
        self.summary.runs_computed += 1
        for kind, entries in notes.items():
            # above the progress bar, which stays whole below it
            bar.write(f"note: {name} {self.label(p)}: {kind}: {len(entries)} item(s) "
                      f"({next(iter(entries.values()))['handled']})", file=self.out)

    @staticmethod
    def label(p: RunPlan) -> str:
        if p.n_frames is not None:
            return f"n_f={p.n_frames}" + (" reversed" if p.variant == "reversed" else "")
        return f"n_c={p.n_captions}" + {"negative": " negatives", "long_caption": " long caption"}.get(p.variant, "")

    def _prepare(self, adapter, p: RunPlan, batch):
        """Model inputs of one batch and notes on how odd items were handled (runs in the worker)."""
        kind, raw, notes = self.batch_inputs(p, batch, self.frames_cache.get)
        prepared, more = model_inputs(adapter, kind, raw, [it.item_id for it in batch], self.options.image_mode)
        for key, entries in more.items():
            notes.setdefault(key, {}).update(entries)
        return prepared, notes

    def batch_inputs(self, p: RunPlan, batch, get_video) -> tuple[str, list, dict]:
        """``(kind, raw, notes)`` of one batch before any model processor: ``("text", [str])`` or
        ``("video", [(n_f, H, W, 3) uint8])`` (frames sampled, reversed for that variant), and notes
        on odd items. ``get_video(path)`` returns a :class:`DecodedVideo` holding at least the frames
        :meth:`_wanted_frames` names. Needs no model: a Ray CPU worker runs it as well."""
        notes: dict = {}
        if p.n_captions is not None:
            texts = []
            for it in batch:
                if p.variant == "negative":  # only items with a negative are in its run (run_items)
                    texts.append(it.negatives[0])
                    continue
                if p.variant == "long_caption":  # every item has one (the manifest checks)
                    texts.append(it.long_caption)
                    continue
                if len(it.captions) < p.n_captions:
                    notes.setdefault("fewer_captions", {})[it.item_id] = {
                        "has": len(it.captions), "asked": p.n_captions,
                        "handled": "all available captions were used"}
                o = self.options
                ordered = caption_order(it.captions, it.item_id, o.caption_order, o.caption_seed)
                texts.append(caption_text(ordered, p.n_captions))
            return "text", texts, notes
        videos = []
        for it in batch:
            video = get_video(it.video)
            T = video.n_frames
            if video.declared_frames is not None and video.declared_frames != T:
                notes.setdefault("frame_count_mismatch", {})[it.item_id] = {
                    "declared": video.declared_frames, "decoded": T,
                    "handled": "the header's frame count is wrong; frames were sampled from the decoded ones"}
            if video.truncated():
                notes.setdefault("truncated_videos", {})[it.item_id] = {
                    "duration_frames": video.duration_frames, "decoded": T,
                    "handled": "the file ends before the duration its header states (cut short?); frames were "
                               "sampled from the decoded ones"}
            if T < p.n_frames:
                notes.setdefault("short_videos", {})[it.item_id] = {
                    "frames": T, "asked": p.n_frames,
                    "handled": "uniform sampling repeats frames (round(linspace(0, T-1, n_f)))"}
            picked = sample_indices(T, p.n_frames)
            # the reversed video's i-th frame is frame T-1-i of the original
            videos.append(video.take(T - 1 - picked if p.variant == "reversed" else picked))
        return "video", videos, notes

    @staticmethod
    def _check_finite(vectors, name, p, batch):
        if np.isfinite(vectors).all():
            return
        layer, pos = np.argwhere(~np.isfinite(vectors))[0][:2]
        raise ModelError(
            f"{name} produced NaN/inf at layer {layer} for item {batch[pos].item_id!r} "
            f"({Precompute.label(p)}); earlier batches are kept, this run stays unfinished. "
            "Try --dtype float32 if you used half precision."
        )


def pinned_revision(info, probe):
    """``info`` with the revision of a random-init transformers build as its config states it before
    loading (what ``sweep plan`` and :meth:`Precompute.all_done` match on): loading rewrites the config
    (``dtype``, T5's ``is_encoder_decoder``, sub-config dtypes) and with it the hash the loaded adapter
    reports. Trained weights' revisions (folder fingerprint, hub commit) do not depend on the config."""
    if not (getattr(probe, "random_init", False) and hasattr(probe, "config")):
        return info
    from dataclasses import replace

    return replace(info, revision=probe.config_revision())


def run_config(identity: dict, extras: dict) -> dict:
    """A run's config JSON: its identity (what its run id hashes) with extras beside it (batch size,
    code version, device, the adapter's layer widths and block path), the identity winning where a
    key is in both; ``not_identity`` lists the extras, so ``layerscope merge`` recovers the identity
    (and with it the unsharded run id) exactly."""
    return {**extras, **identity, "not_identity": sorted(k for k in extras if k not in identity)}


def model_inputs(adapter: Adapter, kind: str, raw: list, item_ids: list[str], image_mode: str):
    """``(Prepared, notes)``: the model's processor/tokenizer applied to a batch's raw inputs from
    :meth:`Precompute.batch_inputs` (notes: captions cut to the model's token limit). Shared by the
    local prefetch worker and the Ray model actors, so both feed the model identical tensors."""
    if kind == "video":
        return adapter.prepare_videos(raw, image_mode=image_mode), {}
    notes: dict = {}
    for item_id, over in zip(item_ids, adapter.text_overflow(raw)):
        if over is not None:
            n_tokens, limit = over
            notes.setdefault("truncated_captions", {})[item_id] = {
                "tokens": n_tokens, "limit": limit,
                "handled": f"the text was cut to the model's first {limit} tokens"}
    return adapter.prepare_texts(raw), notes


def check_text_only(manifest, models: list, modalities: list, close) -> None:
    """A text-only manifest (no item has a video) runs text models only: any other model is named in a
    ``ValueError`` before the store is opened (``close()`` first: nothing was written)."""
    vision = [f"{spec} ({m})" for spec, m in zip(models, modalities) if m != "text"]
    if manifest.text_only and vision:
        close()
        raise ValueError(f"manifest {manifest.path} has no videos (a text-only dataset), so it cannot feed "
                         f"{', '.join(vision)}; run text models on it (a dual encoder's text tower "
                         "with --modality text), or give every item a video")


def _check_mllm_flags(options: dict, models, modalities, close, *, refuse: bool = True) -> None:
    """``--prompt`` and ``--prompt-template`` set away from their defaults shape MLLM runs only: refused
    when no model is an MLLM and ``refuse`` (the flag would change nothing), a note for each other
    model otherwise."""
    given = [f"--{name.replace('_', '-')} {options[name]}" for name in ("prompt", "prompt_template")
             if options.get(name, getattr(DEFAULTS, name)) != getattr(DEFAULTS, name)]
    if not given:
        return
    others = [(spec, m) for spec, m in zip(models, modalities) if m != "mllm"]
    if refuse and len(others) == len(models):
        close()
        raise ValueError(f"{' and '.join(given)} apply to MLLMs only, and no --model is one "
                         f"({', '.join(f'{s}: {m}' for s, m in others)}); drop {'them' if len(given) > 1 else 'it'}")
    for spec, m in others:
        print(f"note: {' and '.join(given)} apply to MLLMs only; {spec} ({m}) is embedded without a prompt",
              file=sys.stderr)


def _check_names(dataset, models, names, random_init) -> None:
    """The dataset's and every model's store name can be names (:mod:`analysis.storage.names`), and no
    two models share one: refused before any model runs, so nothing is stored under a bad name."""
    from analysis.storage.names import check_name

    check_name(dataset, kind="dataset", flag="--dataset")
    given = [names[i] if names and i < len(names) else None for i in range(len(models))]
    final = [store_name(spec, given[i], random_init) for i, spec in enumerate(models)]
    for spec, name, asked in zip(models, final, given):
        check_name(name, flag="--name" if asked else f"--model {spec}: its name")
    first = {}
    for spec, name in zip(models, final):
        if name in first:
            raise ValueError(f"two models would be stored as {name!r} ({first[name]} and {spec}); give each its "
                             "own --name")
        first[name] = spec


def _remove_if_runless(store) -> None:
    """Delete ``store`` (and its WAL) when it holds no run: what a failed first command created."""
    from analysis.storage.store import connect

    try:
        con = connect(store, read_only=True)
        try:
            n = con.execute("SELECT count(*) FROM runs").fetchone()[0]
        finally:
            con.close()
    except Exception:  # unreadable or locked by another writer: left as it is
        return
    if n == 0:
        for p in (Path(store), Path(f"{store}.wal")):
            p.unlink(missing_ok=True)


def run_precompute(*, store, manifest, dataset, models, names=None, modality=None, options=None, progress=True,
                   out=None, job_cls=None, unused_mllm_flags: str = "refuse", **overrides) -> Summary:
    """Library entry of ``layerscope precompute``: validate everything, then run every model.

    ``options``: a :class:`~precompute.batch.options.PrecomputeOptions` (default: its defaults), with
    keyword ``overrides`` of its fields on top. ``job_cls``: the :class:`Precompute` (sub)class or
    factory doing the work (default :class:`Precompute`; :class:`precompute.batch.ray_backend.RayPrecompute`
    spreads it over Ray). ``unused_mllm_flags``: ``--prompt``/``--prompt-template`` given when no model
    is an MLLM are refused (``"refuse"``), or only noted (``"note"``: a sweep's flags cover all its models)."""
    record = (options or DEFAULTS).with_overrides(**overrides)
    options = record.kwargs()
    t0 = time.perf_counter()
    from ..adapters.naming import resolve_names

    names = resolve_names(list(models), names)  # one per model, None where not named
    _check_names(dataset, models, names, options.get("random_init", False))
    # options are checked before the store is opened: a bad flag leaves no trace; then every model's
    # config is read (no weights): a bad spec or a caption shortfall is reported before anything runs
    job = (job_cls or Precompute)(None, manifest, dataset, options=record, progress=progress, out=out)
    if record.trust_remote_code:  # before the probes below import any model's own code
        from ..adapters.remote_code import remote_code_config, warning_line

        for spec in models:
            if remote_code_config(spec) is not None:
                print(warning_line(spec), file=job.out)
    try:
        probes = [job.probe(spec, modality) for spec in models]
    except BaseException:
        job.close()
        raise
    modalities = [p.modality for p in probes]
    check_text_only(manifest, models, modalities, job.close)
    _check_mllm_flags(options, models, modalities, job.close, refuse=unused_mllm_flags == "refuse")
    if record.variants == ("reversed",) and all(m == "text" for m in modalities):
        # said and done: no run to compute, so no store is opened (nor created)
        for i, spec in enumerate(models):
            job.run_model(spec, names[i] if names else None, modality, spec_modality=modalities[i], probe=probes[i])
        job.close()
        job.summary.seconds = time.perf_counter() - t0
        return job.summary
    if {"text", "mllm"} & set(modalities) and record.variants != ("reversed",):  # reversed: no caption runs
        job.check_captions()
    new_store = not Path(store).exists()
    writer = StoreWriter(store)
    try:
        job.w = writer
        writer.put_dataset(dataset, manifest)
        try:
            for i, spec in enumerate(models):
                job.run_model(spec, names[i], modality, spec_modality=modalities[i],
                              probe=probes[i])
        finally:
            job.close()
    except BaseException:
        writer.close()
        if new_store:  # a store this command created and holds no run (a model refused at load) is removed
            _remove_if_runless(store)
        raise
    finally:
        writer.close()
    job.summary.seconds = time.perf_counter() - t0
    return job.summary
