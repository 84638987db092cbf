"""Precompute on a Ray cluster: decoding and preprocessing on CPU actors, forwards on model actors, one writer.

The driver plans exactly as a local run (:class:`~precompute.batch.runner.Precompute`: same run ids,
same batches, same resume point) and writes every batch itself, in order, through the one
:class:`~precompute.batch.writer.StoreWriter` (:meth:`Precompute._commit`, shared with the local path);
only the work between "batch planned" and "vectors back" moves to Ray:

- ``Decoder`` actors (1 CPU each) decode videos, sample frames and assemble captions
  (:meth:`Precompute.batch_inputs`), then apply the model's preprocessing
  (:func:`~precompute.batch.runner.model_inputs` on :meth:`Adapter.preprocessor`, the loaded adapter
  without its weights, fetched once per decoder and model). Each keeps a
  :class:`~precompute.batch.runner.FrameCache` for the whole job, so a video is decoded once for all
  budgets and models, as locally; batch ``b`` of every run goes to decoder ``b mod n`` so it hits.
- ``ModelActor`` actors load the model once (``--gpus-per-model`` GPUs each) and run forwards on
  the prepared tensors; with several replicas batches go round robin. Both kinds restart when their
  process dies (``max_restarts``) and Ray re-runs the calls that were in flight (``max_task_retries``).
- A killed driver leaves the store as a killed local run does (batches commit one transaction
  each, in order); rerunning the command resumes from the first missing item.

Why Ray Core actors and not Ray Data ``map_batches``: the writer must receive batches in the
plain path's order and composition (resume points, bitwise vectors), and a decoder's frame cache
must live across runs (budgets) and models; a Dataset pipeline re-batches and streams without
either guarantee, and would decode every video once per budget.

Batches keep the plain path's composition, so on the same hardware and thread count a Ray run
writes bitwise the same vectors (a local ``--ray local`` run gives the model actor the driver's
torch thread count for that reason). A model whose preprocessing does not pickle is preprocessed
on its model actor instead (said in a note).
"""

from __future__ import annotations

import os
import signal
from collections import deque
from types import SimpleNamespace

from .runner import FrameCache, Precompute, frames_wanted, model_inputs

INSTALL_HINT = 'Ray is not installed: pip install -e ".[ray]" (or pip install ray)'
#: restarts of a dead actor and re-runs of its in-flight calls before the job gives up
MAX_RESTARTS = 3
#: test hook "MARKER:N": a model actor SIGKILLs itself after N forwards unless MARKER exists
#: (it creates MARKER first), so a test kills one worker exactly once, mid-run
KILL_ENV = "LAYERSCOPE_RAY_KILL_ONCE"


def import_ray():
    """The ``ray`` module, or a ValueError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ValueError(f"--ray: {INSTALL_HINT}") from None
    return ray


#: seconds to wait for a TCP connection to a cluster address before calling it unreachable
PROBE_TIMEOUT_S = 5.0


def host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``HOST:PORT`` or ``ray://HOST:PORT`` (IPv6 in brackets), else None (``auto``,
    a bare host: Ray resolves those itself)."""
    rest = address[len("ray://"):] if address.startswith("ray://") else address
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return None
    return host.strip("[]"), int(port)


def check_reachable(address: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Refuse, in at most ``timeout`` seconds, an address where nothing accepts a TCP connection.
    ``ray.init`` does not give up on such an address: it retries for ever, warning every 30 s."""
    import socket

    target = host_port(address)
    if target is None:
        return
    try:
        with socket.create_connection(target, timeout=timeout):
            return
    except OSError as exc:
        why = "timed out" if isinstance(exc, socket.timeout) else (exc.strerror or type(exc).__name__).lower()
        raise ValueError(f"--ray {address}: nothing answers at {target[0]}:{target[1]} ({why}); start the cluster "
                         "there (`ray start --head`), check the address and port, or pass --ray local") from None


class RaySession:
    """Connect to Ray for the duration of a ``with`` block (at the first :meth:`connect`).

    ``address``: ``local`` starts a private Ray instance on this machine (``num_cpus`` cores,
    default all; stopped on exit); ``auto`` joins the cluster this machine belongs to (``ray start``
    ran here); anything else is a cluster address (``HOST:6379`` or ``ray://HOST:10001``).
    Joining leaves the cluster running. ``is_local``: the workers share this machine's cores.
    """

    def __init__(self, address: str, *, num_cpus: int | None = None):
        if not address:
            raise ValueError("--ray needs local, auto or a cluster address")
        self.address = address
        self.num_cpus = num_cpus
        self.is_local = address == "local"
        self.ray = import_ray()
        self._started = False

    def __enter__(self):
        return self  # connects on first use: a sweep with nothing left to do starts no Ray

    def connect(self):
        ray = self.ray
        if self._started or ray.is_initialized():  # an embedding program (or a test) connected already
            return self
        try:
            if self.is_local:
                ray.init(address="local", num_cpus=self.num_cpus, include_dashboard=False,
                         log_to_driver=False, configure_logging=False)
            else:
                check_reachable(self.address)
                ray.init(address=self.address, log_to_driver=False)
        except Exception as exc:  # no cluster at that address, version mismatch, ...
            first = (str(exc).strip().splitlines() or [""])[0]
            raise ValueError(f"--ray {self.address}: cannot connect to Ray: {type(exc).__name__}: {first}") from None
        self._started = True
        return self

    def __exit__(self, *exc):
        if self._started:
            self.ray.shutdown()
        return False

    def resources(self) -> dict:
        self.connect()
        return self.ray.cluster_resources()


def _decoder_class(ray):
    @ray.remote(num_cpus=1, max_restarts=MAX_RESTARTS, max_task_retries=MAX_RESTARTS)
    class Decoder:
        """CPU worker: decodes and samples a batch's videos (or assembles its captions) and applies
        the model's preprocessing (processor / tokenizer / transform); one frame cache per actor,
        kept across budgets and models, so a video is decoded once as in a local run."""

        def __init__(self, frames, variants, caption_rules: dict):
            from functools import partial

            self.cache = FrameCache(partial(frames_wanted, frames=list(frames), variants=list(variants)))
            # what batch_inputs reads of its job for caption runs: the options' caption rules
            self.rules = SimpleNamespace(options=SimpleNamespace(**caption_rules))
            self.preprocessors = {}

        def prepare(self, p, batch, image_mode, key, boxed):
            """``(inputs, notes)``: a :class:`~precompute.adapters.hf.Prepared` for the model actor, or
            ``(kind, raw, item_ids)`` when the model's preprocessing could not be shipped (``boxed``
            is ``[None]``; the actor then applies it). ``boxed = [ref]`` keeps Ray from fetching the
            preprocessor on every call: it is fetched once per actor and model."""
            kind, raw, notes = Precompute.batch_inputs(self.rules, p, batch, self.cache.get)
            item_ids = [it.item_id for it in batch]
            if boxed[0] is None:
                return (kind, raw, item_ids), notes
            if key not in self.preprocessors:
                self.preprocessors = {key: ray.get(boxed[0])}  # one model at a time
            prepared, more = model_inputs(self.preprocessors[key], kind, raw, item_ids, image_mode)
            for k, entries in more.items():
                notes.setdefault(k, {}).update(entries)
            return prepared, notes

    return Decoder


def _model_class(ray):
    # two calls at a time: Ray receives batch i+1's inputs while the forward of batch i runs;
    # forwards take turns (one lock)
    @ray.remote(max_restarts=MAX_RESTARTS, max_task_retries=MAX_RESTARTS, max_concurrency=2)
    class ModelActor:
        """Holds one model and runs its forwards (``embed``)."""

        def __init__(self, spec, load_options: dict, threads: int | None, kill: str | None):
            import threading

            from ..adapters.dispatch import load_adapter

            if threads:
                import torch

                torch.set_num_threads(threads)
            self.forward = threading.Lock()
            self.kill, self.calls, self.error = kill, 0, None
            try:
                self.adapter = load_adapter(spec, **load_options)
            except Exception as exc:  # reported by describe() as the one-line error it is locally
                self.error = f"{exc}" if isinstance(exc, ValueError) else f"cannot load {spec!r}: {exc}"

        def describe(self):
            if self.error:
                return {"error": self.error}
            a = self.adapter
            prompts = {}
            for side in ("video", "text"):
                try:
                    prompts[side] = a.prompt_format(side)
                except Exception:  # a side the model has no prompt for
                    prompts[side] = None
            return {"info": a.info(), "prompts": prompts, "device": str(a.device), "run_config": a.run_config()}

        def preprocessor(self):
            """The adapter without its weights (:meth:`~precompute.adapters.hf.Adapter.preprocessor`)."""
            return self.adapter.preprocessor()

        def embed(self, inputs, image_mode):
            """``(vectors, notes)`` of one batch: a Prepared from a decoder, or ``(kind, raw,
            item_ids)`` to preprocess here (a model whose preprocessing does not pickle)."""
            notes = {}
            if isinstance(inputs, tuple):
                inputs, notes = model_inputs(self.adapter, *inputs, image_mode)
            with self.forward:
                vectors = self.adapter.run(inputs)
                self.calls += 1
            if self.kill:
                marker, after = self.kill.rsplit(":", 1)
                if self.calls >= int(after) and not os.path.exists(marker):
                    open(marker, "w").close()
                    os.kill(os.getpid(), signal.SIGKILL)
            return vectors, notes

    return ModelActor


class RemoteModel:
    """What :meth:`Precompute.run_model` needs of an adapter, answered by model actors;
    ``preprocessor``: a boxed object ref of the weightless adapter for the decoders (``[None]``
    when it could not be shipped)."""

    def __init__(self, actors, described: dict, preprocessor: list, key: int):
        self.actors = actors
        self._info = described["info"]
        self._prompts = described["prompts"]
        self._run_config = described["run_config"]
        self.device = described["device"]
        self.preprocessor = preprocessor
        self.key = key

    def info(self):
        return self._info

    def run_config(self):
        return self._run_config

    def prompt_format(self, side: str):
        return self._prompts.get(side)


class RayPrecompute(Precompute):
    """A :class:`Precompute` whose decoding and forwards run on Ray actors (see the module doc).

    ``session``: an entered :class:`RaySession`; ``gpus_per_model``: GPUs each model actor requests
    (default: 1 where the cluster has GPUs, else 0); ``replicas``: model actors per model;
    ``decoders``: decoding actors (default: the cluster's CPUs less one per replica, at least 1, at
    most 8); ``window``: batches in flight ahead of the writer (default: 2 per actor, at least 3).
    """

    prefetch_first = False

    def __init__(self, writer, manifest, dataset, *, session: RaySession, gpus_per_model: float | None = None,
                 replicas: int = 1, decoders: int | None = None, window: int | None = None, **job):
        super().__init__(writer, manifest, dataset, **job)
        if replicas < 1:
            raise ValueError(f"Ray replicas must be >= 1, got {replicas}")
        if gpus_per_model is not None and gpus_per_model < 0:
            raise ValueError(f"--gpus-per-model must be >= 0, got {gpus_per_model}")
        self.session = session
        self.ray = session.ray
        res = session.resources()
        self.gpus = (1 if res.get("GPU", 0) > 0 else 0) if gpus_per_model is None else gpus_per_model
        self.replicas = int(replicas)
        cpus = int(res.get("CPU", 1))
        self.n_decoders = int(decoders) if decoders else max(1, min(8, cpus - self.replicas))
        self.window = int(window) if window else max(3, 2 * (self.replicas + self.n_decoders))
        if session.is_local:  # no autoscaler adds nodes: actors that cannot fit would wait forever
            if self.gpus * self.replicas > res.get("GPU", 0):
                raise ValueError(f"--gpus-per-model {gpus_per_model}: {self.replicas} model actor(s) need "
                                 f"{self.gpus * self.replicas:g} GPU(s), this machine has {res.get('GPU', 0):g}")
            if self.replicas + self.n_decoders > cpus:
                raise ValueError(f"Ray: {self.replicas} model actor(s) and {self.n_decoders} decoder(s) need "
                                 f"{self.replicas + self.n_decoders} CPUs, this machine has {cpus}")
        self.decoders = None

    def load_model(self, spec, modality):
        ray = self.ray
        threads = None
        if self.session.is_local:  # the same torch thread count as a plain run on this machine
            import torch

            threads = torch.get_num_threads()
        opts = self.adapter_options(modality)
        cls = _model_class(ray)
        actors = [cls.options(num_cpus=1, num_gpus=self.gpus).remote(spec, opts, threads, os.environ.get(KILL_ENV))
                  for _ in range(self.replicas)]
        self._actors = actors
        self._decoder_pool()  # the decoders start (imports) while the model loads
        described = ray.get([a.describe.remote() for a in actors])
        for d in described:
            if "error" in d:
                from ..adapters.hf import ModelError

                raise ModelError(d["error"])
        try:  # the weightless adapter, fetched by the decoders once each
            boxed = [ray.put(ray.get(actors[0].preprocessor.remote()))]
        except Exception as exc:  # a processor that does not pickle: the model actors preprocess
            first = (str(exc).strip().splitlines() or [""])[0]
            print(f"note: {spec}: its preprocessing cannot be shipped to CPU workers ({first}); "
                  "the model actor applies it", file=self.out)
            boxed = [None]
        self._models_loaded = getattr(self, "_models_loaded", 0) + 1
        return RemoteModel(actors, described[0], boxed, self._models_loaded)

    def run_model(self, *args, **kwargs):
        self._actors = []
        try:
            return super().run_model(*args, **kwargs)
        finally:
            # frees the model's memory (and GPU) before the next model; the decoders (and their
            # frame caches) serve every model of the invocation and go with the job
            for a in self._actors:
                self.ray.kill(a)

    def close(self):
        super().close()
        for a in self.decoders or []:
            self.ray.kill(a)
        self.decoders = None

    def _decoder_pool(self):
        if self.decoders is None:
            cls = _decoder_class(self.ray)
            rules = {"caption_order": self.options.caption_order, "caption_seed": self.options.caption_seed}
            self.decoders = [cls.remote(self.options.frames, self.options.variants, rules)
                             for _ in range(self.n_decoders)]
        return self.decoders

    def _submit(self, model: RemoteModel, p, b0: int, batch, t: int):
        """Refs ``(vectors_and_notes, input_notes)`` of one batch: decoded and preprocessed by a
        decoder (batch ``b`` of every run on decoder ``b mod n``, so its frame cache hits across
        budgets), embedded by a model actor (round robin)."""
        decoders = self._decoder_pool()
        decoder = decoders[(b0 // p.batch) % len(decoders)]
        inputs, notes = decoder.prepare.options(num_returns=2).remote(p, batch, self.options.image_mode, model.key,
                                                                      model.preprocessor)
        actor = model.actors[t % len(model.actors)]
        return actor.embed.remote(inputs, self.options.image_mode), notes

    def _execute(self, model, name, info, pending, items):
        ray = self.ray
        tasks, notes, bar = self._batches(name, pending, items, " (ray)")
        inflight: deque = deque()
        nxt = 0
        try:
            for t, (p, b0, batch) in enumerate(tasks):
                while nxt < len(tasks) and nxt - t < self.window:
                    inflight.append(self._submit(model, *tasks[nxt], nxt))
                    nxt += 1
                if b0 == p.state["n_done"]:
                    bar.set_postfix_str(self.label(p))
                out_ref, notes_ref = inflight.popleft()
                vectors, model_notes = ray.get(out_ref)
                self._commit(name, p, b0, batch, items, vectors, notes, bar, ray.get(notes_ref), model_notes)
        except Exception as exc:
            raise _plain_error(ray, exc) from None
        finally:
            bar.close()


class RayRunError(ValueError):
    """Ray gave up on a worker (restarts and retries spent, node lost, ...): one line in the CLI."""


def _plain_error(ray, exc):
    """A Ray task error carrying one of our ValueErrors becomes that error; other Ray failures a
    :class:`RayRunError` (the CLI prints both as one line)."""
    cause = getattr(exc, "cause", None)
    if isinstance(exc, ray.exceptions.RayTaskError) and isinstance(cause, ValueError):
        return cause
    if isinstance(exc, ray.exceptions.RayError):
        first = (str(exc).strip().splitlines() or [""])[0]
        return RayRunError(f"Ray: {type(exc).__name__}: {first} (finished batches are kept; rerun to resume)")
    return exc


def ray_job(session: RaySession, **ray_options):
    """A ``job_cls`` for :func:`~precompute.batch.runner.run_precompute` running on ``session``."""
    def make(*args, **kwargs):
        return RayPrecompute(*args, session=session, **ray_options, **kwargs)
    return make


# ---- analysis ------------------------------------------------------------------------------
def _analysis_task(ray):
    @ray.remote(num_cpus=1, max_retries=MAX_RESTARTS)
    def score_chunk(store, clamp, kind, unit, chunk):
        """One chunk of analysis tasks on a read-only connection of its own, closed at the end (the
        driver reopens the store for writing once every chunk is back)."""
        from analysis.studies import parallel

        parallel.init_worker(store, clamp)
        try:
            return parallel.run_chunk(kind, unit, chunk)
        finally:
            parallel.close_worker()

    return score_chunk


def analysis_executor(session: RaySession):
    """An ``executor`` for :func:`analysis.studies.analyze_store`: it scores pairs, scaling fits and
    profiles in Ray tasks of 1 CPU each instead of local processes. Workers open the store read-only
    at the same path: on a cluster it must be on storage every node sees."""
    ray = session.ray
    task = _analysis_task(ray)

    def run(store, clamp, kind, unit, chunks):
        session.connect()
        refs = {task.remote(str(store), clamp, kind, unit, chunk): pos for pos, chunk in enumerate(chunks)}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                try:
                    yield refs[ref], ray.get(ref)
                except Exception as exc:
                    raise _plain_error(ray, exc) from None

    return run
