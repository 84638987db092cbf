"""Sweep files: a whole study (datasets × models × budgets × variants, then analysis) in one TOML.

``layerscope sweep plan SWEEP.toml --store S`` validates the file and lists every run, done or
not, with the size of what is left; ``layerscope sweep run SWEEP.toml --store S [--ray ...]``
precomputes what is missing (a model whose runs are all done is not even loaded) and then
analyses. Every problem in the file is reported as ``FILE:LINE: FIELD: what is wrong`` before
anything runs (metrics, references and a ``blocks`` path included). ``sweep plan`` loads no weights
and runs no model code: a ``trust_remote_code`` model is planned from its ``config.json``. The format (every field optional unless marked)::

    [precompute]                      # defaults of every model
    frames = [1, 2, 4, 8, 16]         # n_f budgets (video, image and MLLM models)
    captions = [1, 2, 4, 8, 10]       # n_c budgets (text and MLLM models)
    variants = ["original"]           # and/or "reversed"
    batch_size = 8
    dtype = "float32"                 # float32 | bfloat16 | float16
    device = "auto"                   # auto | cpu | cuda | cuda:N
    image_mode = "frames"             # frames | first
    caption_order = "first"           # first | random
    caption_seed = 0
    prompt_template = "auto"          # auto | none
    prompt = "eol"                    # eol | plain (MLLMs: TARA's comparison; give the plain one another name)
    allow_fewer_captions = false
    named_layers = true               # also store default / joint (transformers models; --no-named-layers)
    random_init = false               # seeded random weights (the control; "-random-init" in the name)

    [[datasets]]
    name = "msrvtt"                   # required: the dataset's name in the store
    manifest = "data/msrvtt.jsonl"    # required; relative paths are relative to the sweep file

    [[models]]
    source = "MCG-NJU/videomae-base"  # required: hub id or local folder (relative to the sweep file)
    name = "videomae-base"            # store name (default: the hub id or folder name)
    modality = "video"                # override: video | image | text | mllm
    dtype = "bfloat16"                # per-model overrides of [precompute]: dtype, batch_size, device,
    trust_remote_code = false         # trust_remote_code, named_layers, random_init, cache_dir
    blocks = "encoder.layer"          # extract through hooks on this block list (--blocks)
    revision = "main"                 # hub ids only: branch, tag or commit (--revision)
    # weights = "lite0.pth"           # timm models only: a state dict file (--weights), relative to the sweep file

    [analyze]
    enabled = true                    # false: precompute only
    k = 10
    metrics = ["mutual_knn", "cka", "cknna"]
    references = ["bert-base"]
    bootstrap = 200
    clamp = "off"                     # off | platonic | feature
    reorder_k = 5
    downstream_setting = "paper"      # paper | largest
    maps = 24                         # embedding maps per dataset (--maps; 0: none)
    knn = "exact"                     # exact | ann (--knn)
    null_perms = 200                  # shuffles of each best cell's null (--null-perms; 0: none)
    null_metrics = ["mutual_knn"]     # grids whose best cells carry it (--null-metric)
    null_budgets = "largest"          # largest | all (--null-budgets)
    labels = ["scene.shape"]          # manifest fields probed per layer (analyze --labels)
    probes = ["knn", "kmeans"]        # knn | kmeans | linear (analyze --probes)
    jobs = 4                          # analysis processes (default: all cores)

    [ray]                             # used with --ray (or when address is set here)
    address = "auto"                  # local | auto | HOST:6379 | ray://HOST:10001 (--ray overrides)
    gpus_per_model = 1                # GPUs per model actor (default: 1 where the cluster has GPUs)
    replicas = 1                      # model actors per model (data parallel)
    decoders = 4                      # video decoding actors (default: cluster CPUs less replicas)
"""

from __future__ import annotations

import math
import re
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .batch.options import DEFAULTS

DTYPES = ("float32", "bfloat16", "float16")


class SweepError(ValueError):
    """A problem in a sweep file: ``FILE:LINE: FIELD: message``."""


# ---- the file ------------------------------------------------------------------------------
_HEADER = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.\-\"' ]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"^\s*([A-Za-z0-9_\-]+|\"[^\"]*\")\s*=")


def key_lines(text: str) -> dict:
    """Line (1-based) of every table header and top-level ``key =`` in a TOML text.

    Keys are tuples: ``("models", 2, "dtype")`` for the ``dtype`` of the third ``[[models]]``,
    ``("models", 2)`` for that header, ``("analyze", "k")``, ``("k",)`` at the top. Enough to point
    at a field the parser accepted but the schema does not (inline tables count as one key)."""
    lines: dict = {}
    counts: dict = {}
    prefix: tuple = ()
    for no, line in enumerate(text.splitlines(), 1):
        h = _HEADER.match(line)
        if h:
            name = tuple(part.strip().strip("\"'") for part in h.group(2).split("."))
            if h.group(1) == "[[":
                counts[name] = counts.get(name, -1) + 1
                prefix = (*name, counts[name])
            else:
                prefix = name
            lines.setdefault(prefix, no)
            continue
        k = _KEY.match(line)
        if k:
            lines.setdefault((*prefix, k.group(1).strip('"')), no)
    return lines


@dataclass
class ModelSpec:
    source: str
    name: str | None
    modality: str | None
    options: dict  # per-model precompute options (dtype, batch_size, device, trust_remote_code, ...)
    line: int
    store_name: str = ""  # the model's name in the store (name, else the source's, -random-init added)


@dataclass
class DatasetSpec:
    name: str
    manifest: Path
    line: int


@dataclass
class Sweep:
    path: Path
    datasets: list[DatasetSpec]
    models: list[ModelSpec]
    precompute: dict
    analyze: dict
    ray: dict
    lines: dict = field(default_factory=dict, repr=False)

    def model_options(self, m: ModelSpec) -> dict:
        """The precompute options of model ``m``: ``[precompute]`` with its own overrides."""
        return {**self.precompute, **m.options}


# field -> (check, default); a check returns an error message or None
def _ints(v, lo=1):
    return None if isinstance(v, list) and v and all(type(x) is int and x >= lo for x in v) else \
        f"expected a non-empty list of integers >= {lo}, got {v!r}"


def _int(lo):
    return lambda v: None if type(v) is int and v >= lo else f"expected an integer >= {lo}, got {v!r}"


def _num(lo):
    # inf and nan are TOML floats; no count of GPUs is either
    return lambda v: None if type(v) in (int, float) and math.isfinite(v) and v >= lo else \
        f"expected a finite number >= {lo}, got {v!r}"


def _frames(v):
    from .batch.runner import MAX_FRAMES

    err = _ints(v)
    if err is None and max(v) > MAX_FRAMES:
        return f"at most {MAX_FRAMES} frames per video (more than a video holds only repeats frames), got {max(v)}"
    return err


#: what :func:`precompute.adapters.hf.resolve_device` takes (whether that device exists is the run's to find out)
_DEVICE = re.compile(r"^(auto|cpu|cuda|cuda:\d+)$")


def _device(v):
    return None if isinstance(v, str) and _DEVICE.match(v) else f"expected auto, cpu, cuda or cuda:N, got {v!r}"


def _metrics(v):
    err = _strs(v)
    if err:
        return err
    from analysis.registry import get_metric

    for name in v:
        try:
            kind = get_metric(name).kind
        except ValueError as exc:
            return str(exc)
        if kind != "pairwise":
            return f"analyze grids take pairwise metrics; {name!r} is {kind}"
    return None


def _one_of(*choices):
    return lambda v: None if v in choices else f"expected one of {', '.join(map(repr, choices))}, got {v!r}"


def _str(v):
    return None if isinstance(v, str) and v.strip() else f"expected a non-empty string, got {v!r}"


def _bool(v):
    return None if isinstance(v, bool) else f"expected true or false, got {v!r}"


def _strs(v):
    return None if isinstance(v, list) and v and all(isinstance(x, str) and x for x in v) else \
        f"expected a non-empty list of strings, got {v!r}"


def _probes(v):
    from analysis.methods.probes import PROBES

    err = _strs(v)
    bad = [] if err else [x for x in v if x not in PROBES]
    return err or (f"unknown probe {bad[0]!r}; probes: {', '.join(PROBES)}" if bad else None)


def _variants(v):
    return None if isinstance(v, list) and v and set(v) <= {"original", "reversed"} and len(set(v)) == len(v) \
        else f"expected a list of distinct \"original\" / \"reversed\", got {v!r}"


#: the [precompute] table's fields and their checks; defaults are :data:`precompute.batch.options.DEFAULTS`
PRECOMPUTE_FIELDS = {
    "frames": _frames, "captions": _ints, "variants": _variants, "batch_size": _int(1), "dtype": _one_of(*DTYPES),
    "device": _device, "image_mode": _one_of("frames", "first"), "caption_order": _one_of("first", "random"),
    "caption_seed": _int(0), "prompt_template": _one_of("auto", "none"), "prompt": _one_of("eol", "plain"),
    "allow_fewer_captions": _bool,
    "trust_remote_code": _bool, "named_layers": _bool, "random_init": _bool, "blocks": _str, "cache_dir": _str,
}
#: fields of a [[models]] table that override [precompute] for that model
MODEL_OPTIONS = ("dtype", "batch_size", "device", "trust_remote_code", "named_layers", "random_init", "blocks",
                 "revision", "cache_dir", "weights")
MODEL_FIELDS = {"source": _str, "name": _str, "modality": _one_of("video", "image", "text", "mllm"),
                "dtype": _one_of(*DTYPES), "batch_size": _int(1), "device": _device, "trust_remote_code": _bool,
                "named_layers": _bool, "random_init": _bool, "blocks": _str, "revision": _str, "cache_dir": _str,
                "weights": _str}
DATASET_FIELDS = {"name": _str, "manifest": _str}
ANALYZE_FIELDS = {"enabled": _bool, "k": _int(1), "metrics": _metrics, "references": _strs, "bootstrap": _int(0),
                  "clamp": _one_of("off", "platonic", "feature"), "reorder_k": _int(1),
                  "downstream_setting": _one_of("paper", "largest"), "jobs": _int(1), "maps": _int(0),
                  "knn": _one_of("exact", "ann"), "null_perms": _int(0), "null_metrics": _metrics,
                  "null_budgets": _one_of("largest", "all"), "labels": _strs, "probes": _probes,
                  "probe_budgets": _one_of("largest", "all")}
RAY_FIELDS = {"address": _str, "gpus_per_model": _num(0), "replicas": _int(1), "decoders": _int(1)}
TOP = {"precompute", "datasets", "models", "analyze", "ray"}


def _read_text(path: Path) -> str:
    """The file as UTF-8 text (a byte-order mark, as Windows editors write, is dropped); other bytes
    are a :class:`SweepError` naming the line and byte."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise SweepError(f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); save the file as "
                         "UTF-8") from None


class _Fields:
    """Checks of a parsed sweep file's tables; every error names the file and the field's line."""

    def __init__(self, path: Path, data: dict, lines: dict):
        self.path, self.data, self.lines = path, data, lines

    def fail(self, key: tuple, label: str, msg: str):
        # the field's own line, else its table's, else the file
        for k in (key, key[:-1], key[:-2], key[:1]):
            if k in self.lines:
                raise SweepError(f"{self.path}:{self.lines[k]}: {label}: {msg}")
        raise SweepError(f"{self.path}: {label}: {msg}")

    def table(self, fields: dict, value, key: tuple, label: str) -> dict:
        if not isinstance(value, dict):
            self.fail(key, label, "expected a table")
        for f, v in value.items():
            check = fields.get(f)
            if check is None:
                self.fail((*key, f), f"{label}.{f}", f"unknown field; expected one of {', '.join(fields)}")
            check = check[0] if isinstance(check, tuple) else check
            err = check(v)
            if err:
                self.fail((*key, f), f"{label}.{f}", err)
        return value

    def array(self, name: str, fields: dict, required: tuple) -> list[tuple[dict, tuple, str]]:
        value = self.data.get(name)
        if value is None:
            raise SweepError(f"{self.path}: {name}: at least one [[{name}]] table is required")
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            self.fail((name,), name, f"expected [[{name}]] tables")
        out = []
        for i, v in enumerate(value):
            key, label = (name, i), f"{name}[{i}]"
            self.table(fields, v, key, label)
            for f in required:
                if f not in v:
                    self.fail(key + ("",), label, f"missing required field {f!r}")
            out.append((v, key, label))
        return out


def _parse_toml(path: Path, text: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        where = f"{path}:{m.group(1)}" if m else f"{path}"
        raise SweepError(f"{where}: TOML syntax error: {str(exc).split(' (at line')[0]}") from None


def load_sweep(path) -> Sweep:
    """Parse and validate a sweep file (see the module doc); raises :class:`SweepError`.

    Checks: TOML syntax, known tables and fields, types and ranges, at least one dataset and
    one model, unique dataset and model names, manifests and local model folders that exist."""
    path = Path(path)
    if not path.is_file():
        raise SweepError(f"{path}: sweep file does not exist")
    text = _read_text(path)
    data = _parse_toml(path, text)
    lines = key_lines(text)
    fields = _Fields(path, data, lines)
    for k in data:
        if k not in TOP:
            fields.fail((k,), k, f"unknown table or field; expected {', '.join(sorted(TOP))}")
    pre = fields.table(PRECOMPUTE_FIELDS, data.get("precompute", {}), ("precompute",), "precompute")
    defaults = DEFAULTS.kwargs()
    precompute = {f: pre.get(f, defaults[f]) for f in PRECOMPUTE_FIELDS}
    analyze = fields.table(ANALYZE_FIELDS, data.get("analyze", {}), ("analyze",), "analyze")
    ray = fields.table(RAY_FIELDS, data.get("ray", {}), ("ray",), "ray")
    # absolute: a sweep given as `sweep.toml` has parent `.`, and `./nope` joined to it is `nope`,
    # which would pass for a hub id
    base = path.parent.absolute()
    datasets = _dataset_specs(fields, base)
    if precompute.get("cache_dir") and not Path(precompute["cache_dir"]).is_absolute():
        precompute["cache_dir"] = str(base / precompute["cache_dir"])
    models = _model_specs(fields, base, precompute)
    return Sweep(path, datasets, models, precompute, dict(analyze), dict(ray), lines)


def _dataset_specs(fields: _Fields, base: Path) -> list[DatasetSpec]:
    datasets, seen = [], {}
    for v, key, label in fields.array("datasets", DATASET_FIELDS, ("name", "manifest")):
        if v["name"] in seen:
            fields.fail((*key, "name"), f"{label}.name", f"dataset {v['name']!r} is already {seen[v['name']]}")
        seen[v["name"]] = label
        manifest = (base / v["manifest"]) if not Path(v["manifest"]).is_absolute() else Path(v["manifest"])
        if not manifest.is_file():
            fields.fail((*key, "manifest"), f"{label}.manifest",
                        f"{manifest} is a folder, not a manifest file (.jsonl or .csv)"
                        if manifest.is_dir() else f"{manifest} does not exist")
        datasets.append(DatasetSpec(v["name"], manifest, fields.lines.get(key, 0)))
    return datasets


def _model_specs(fields: _Fields, base: Path, precompute: dict) -> list[ModelSpec]:
    from analysis.storage.names import name_problem

    from .adapters.hf import store_name

    models, seen = [], {}
    for v, key, label in fields.array("models", MODEL_FIELDS, ("source",)):
        source = v["source"]
        local = base / source
        if not Path(source).is_absolute() and (source.startswith((".", "/")) or local.exists()):
            source = str(local)  # a folder next to the sweep file; anything else is a hub id
        if source.startswith((".", "/")) and not Path(source).exists():
            fields.fail((*key, "source"), f"{label}.source", f"model folder {source} does not exist")
        options = {f: v[f] for f in MODEL_OPTIONS if f in v}
        if options.get("cache_dir") and not Path(options["cache_dir"]).is_absolute():
            options["cache_dir"] = str(base / options["cache_dir"])  # as every path: from the sweep file
        if options.get("weights"):
            options["weights"] = str(base / options["weights"])  # an absolute path stays as it is
            if not Path(options["weights"]).is_file():
                fields.fail((*key, "weights"), f"{label}.weights", f"weights file {options['weights']} does not exist")
        name = store_name(source, v.get("name"), options.get("random_init", precompute["random_init"]))
        why = name_problem(name)
        if why:  # at load, before any model of the sweep runs (precompute would refuse it only at its turn)
            fields.fail((*key, "name" if "name" in v else "source"), f"{label}.name",
                        f"{name!r} is not a model name: {why}")
        if name in seen:
            fields.fail((*key, "name" if "name" in v else "source"), f"{label}.name",
                        f"model name {name!r} is already {seen[name]}; give each model its own name")
        seen[name] = label
        models.append(ModelSpec(source, v.get("name"), v.get("modality"), options, fields.lines.get(key, 0), name))
    return models


# ---- planning --------------------------------------------------------------------------------
@dataclass
class PlannedRun:
    dataset: str
    model: str
    label: str  # n_f=4 / n_c=2 negatives / ...
    n_items: int
    n_done: int
    status: str  # done | partial | todo
    bytes_left: int | None  # float32 vectors still to write (None: width unknown before loading)


@dataclass
class Plan:
    runs: list[PlannedRun]
    #: (dataset, model name) pairs whose runs are all done: `sweep run` does not load them
    done_pairs: set
    manifests: dict  # dataset -> Manifest
    probes: dict  # model name -> config-only Adapter
    #: what the plan cannot know (a remote-code model it did not run), one line each
    notes: list = field(default_factory=list)

    def lines(self) -> list[str]:
        """Human-readable table and totals."""
        out = []
        header = ("dataset", "model", "run", "status", "items", "to write")
        rows = [(r.dataset, r.model, r.label, r.status, f"{r.n_done}/{r.n_items}",
                 "-" if r.status == "done" else ("?" if r.bytes_left is None else _size(r.bytes_left)))
                for r in self.runs]
        widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
        for row in [header, *rows]:
            out.append("  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip())
        todo = [r for r in self.runs if r.status != "done"]
        known = sum(r.bytes_left or 0 for r in todo)
        unknown = sum(r.bytes_left is None for r in todo)
        items = sum(r.n_items - r.n_done for r in todo)
        out.extend(self.notes)
        out.append(f"\n{len(self.runs)} run(s): {len(self.runs) - len(todo)} done, {len(todo)} to run "
                   f"({items} item embeddings, about {_size(known)} of vectors"
                   + (f", plus {unknown} run(s) of a width known only once the model loads" if unknown else "")
                   + ")")
        return out


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def _probe(sweep: Sweep, m: ModelSpec):
    """The model's config-only adapter (no weights), errors pointing at the sweep file. A model that
    brings its own code is planned from its config JSON without running that code
    (:class:`precompute.adapters.remote_code.RemoteCodeProbe`): the plan loads and runs nothing."""
    from .adapters.dispatch import probe_model
    from .adapters.remote_code import RemoteCodeProbe, remote_code_config

    opts = sweep.model_options(m)
    try:
        config = remote_code_config(m.source) if opts["trust_remote_code"] else None
        if config is not None:
            return RemoteCodeProbe(m.source, config, modality=m.modality, blocks=opts["blocks"],
                                   random_init=opts["random_init"])
        probe = probe_model(m.source, device="cpu", dtype=opts["dtype"], trust_remote_code=opts["trust_remote_code"],
                            modality=m.modality, prompt_template=opts["prompt_template"], blocks=opts["blocks"],
                            random_init=opts["random_init"], named_layers=opts["named_layers"],
                            hub={k: opts[k] for k in ("revision", "cache_dir") if opts.get(k)},
                            prompt=opts.get("prompt", "eol"), weights=opts.get("weights"))
    except ValueError as exc:
        raise SweepError(f"{sweep.path}:{m.line}: models source {m.source!r}: {exc}") from None
    if opts["blocks"] and hasattr(probe, "config"):  # a transformers model: its skeleton shows the path
        from .adapters.hooks import check_block_path

        why = check_block_path(probe.config, opts["blocks"])
        if why:
            i = sweep.models.index(m)
            key = ("models", i, "blocks") if "blocks" in m.options else ("precompute", "blocks")
            label = f"models[{i}].blocks" if "blocks" in m.options else "precompute.blocks"
            raise SweepError(f"{sweep.path}:{sweep.lines.get(key, m.line)}: {label}: {why}")
    return probe


def _check_references(sweep: Sweep, known: set) -> None:
    """``[analyze] references`` name models of the sweep or of the store (a side may follow the name,
    ``clip [text]``), as analysis requires after all precompute: refused here, before it."""
    from analysis.sides import split_side

    bad = [r for r in sweep.analyze.get("references", ()) if split_side(r)[0] not in known]
    if bad:
        line = sweep.lines.get(("analyze", "references"), sweep.lines.get(("analyze",), 0))
        raise SweepError(f"{sweep.path}:{line}: analyze.references: unknown model(s) {bad}; the sweep's and the "
                         f"store's models are {sorted(n for n in known if n)} (a side may follow the name: "
                         "'clip [text]', 'clip [image]')")


def _stored_runs(store) -> list[dict]:
    from analysis.storage.store import connect

    from .batch.known_runs import stored_runs

    if not Path(store).exists():
        return []
    con = connect(store, read_only=True)
    try:
        return stored_runs(con)
    finally:
        con.close()


def _fewer_captions_fix(fewest: int) -> str:
    """How a sweep file lowers its caption budgets to what every item has (``fewest`` captions)."""
    return (f"Set captions in [precompute] to values up to {fewest} (e.g. captions = "
            f"[{', '.join(map(str, range(1, fewest + 1)))}]), or allow_fewer_captions = true to use all of an "
            "item's captions when it has fewer (recorded in each run's notes).")


def plan_sweep(sweep: Sweep, store) -> Plan:
    """Every run the sweep asks for and how much of it the store holds (no model is loaded).

    A stored run matches a planned one by :func:`precompute.batch.known_runs.match` (every identity field
    the config tells, as ``layerscope precompute`` decides to skip a model)."""
    from .batch.known_runs import keep_unknown_revision, known_identity, match
    from .inputs.manifest import load_manifest
    from .batch.runner import Precompute, check_text_only

    manifests = {}
    for d in sweep.datasets:
        try:
            manifests[d.name] = load_manifest(d.manifest)
        except ValueError as exc:
            raise SweepError(f"{sweep.path}:{d.line}: datasets {d.name!r}: {exc}") from None
    probes = {m.store_name: (m, _probe(sweep, m)) for m in sweep.models}
    stored = _stored_runs(store)
    _check_references(sweep, {m.store_name for m in sweep.models} | {r["config"].get("model") for r in stored})
    runs, done_pairs = [], set()
    for d in sweep.datasets:
        manifest = manifests[d.name]
        for name, (m, probe) in probes.items():
            opts = sweep.model_options(m)
            try:  # as `run` would refuse it, with the model's line
                check_text_only(manifest, [name], [probe.modality], lambda: None)
            except ValueError as exc:
                raise SweepError(f"{sweep.path}:{m.line}: models {name!r} on datasets {d.name!r}: {exc}") from None
            job = Precompute(None, manifest, d.name, options=DEFAULTS.with_overrides(**opts), progress=False)
            job.close()
            if {"text", "mllm"} & {probe.modality} and opts["variants"] != ["reversed"] \
                    and not opts["allow_fewer_captions"]:
                line = sweep.lines.get(("precompute", "captions"))
                budgets = ", ".join(map(str, opts["captions"]))
                asked = (f"precompute.captions = [{budgets}]" if line else
                         f"the default captions = [{budgets}] (no `captions` in [precompute])")
                try:
                    job.check_captions(asked_by=asked, fix=_fewer_captions_fix)
                except ValueError as exc:
                    raise SweepError(f"{sweep.path}:{line or d.line}: datasets {d.name!r} with models {name!r}: "
                                     f"{exc}") from None
            known = known_identity(probe)
            keep_unknown_revision(known, name, stored, opts.get("revision"))
            pair_done = True
            for p in job.plan(known.adapter, name, known.info):
                n = len(Precompute.run_items(p, manifest.items))
                n_done, status = match(p, known, stored, n)
                pair_done &= status == "done"
                left = None if known.dims is None else (n - n_done) * known.dims[0] * known.dims[1] * 4
                runs.append(PlannedRun(d.name, name, Precompute.label(p), n, n_done, status, left))
            if pair_done:
                done_pairs.add((d.name, name))
    from .adapters.remote_code import RemoteCodeProbe, cannot_know

    notes = [cannot_know(name) for name, (_, probe) in probes.items() if isinstance(probe, RemoteCodeProbe)]
    return Plan(runs, done_pairs, manifests, probes, notes)


# ---- running -----------------------------------------------------------------------------
def _groups(sweep: Sweep, todo: list) -> list:
    """``[(dataset, [(model, name), ...])]``: the models of a dataset left to run, those with the same
    options (modality override, dtype, batch size, ...) in one precompute job, so its frame cache
    decodes each video once for all of them, as one ``layerscope precompute`` with several models."""
    groups: dict = {}
    for d, m, name in todo:
        opts = sweep.model_options(m)
        key = (d.name, m.modality, tuple(sorted((k, tuple(v) if isinstance(v, list) else v)
                                               for k, v in opts.items())))
        groups.setdefault(key, (d, []))[1].append((m, name))
    return list(groups.values())


def analyze_options(sweep: Sweep, jobs: int):
    """The :class:`analysis.studies.AnalyzeOptions` of the sweep's ``[analyze]`` table (a field left
    out is the store's own setting; ``jobs``: the default worker count)."""
    from analysis.studies import AnalyzeOptions

    a = sweep.analyze
    tup = (lambda v: None if v is None else tuple(v))
    return AnalyzeOptions(
        k=a.get("k"), metrics=a.get("metrics"), references=a.get("references"), n_boot=a.get("bootstrap"),
        clamp=a.get("clamp"), reorder_k=a.get("reorder_k"), downstream_setting=a.get("downstream_setting"),
        maps=a.get("maps"), knn=a.get("knn"), n_null=a.get("null_perms"), null_metrics=tup(a.get("null_metrics")),
        null_budgets=a.get("null_budgets"), labels=tup(a.get("labels")), probes=tup(a.get("probes")),
        probe_budgets=a.get("probe_budgets"), datasets=tuple(d.name for d in sweep.datasets),
        jobs=a.get("jobs") or jobs)


def run_sweep(sweep: Sweep, store, *, ray: str | None = None, gpus_per_model: float | None = None,
              progress: bool = True, log=None) -> dict:
    """Precompute every missing run of the sweep, then analyse (unless ``[analyze] enabled = false``).

    ``ray``: ``local`` / ``auto`` / an address (default: ``[ray] address`` of the file, else no Ray).
    A (dataset, model) pair whose runs are all in the store is skipped without loading the model;
    the rest go through :func:`~precompute.batch.runner.run_precompute`, which resumes unfinished runs.
    Returns ``{"runs_computed", "runs_done_before", "pairs_skipped", "items_embedded",
    "analysis": analyze_store's dict or None, "seconds"}``."""
    from contextlib import nullcontext

    from .batch.runner import run_precompute

    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    t0 = time.perf_counter()
    plan = plan_sweep(sweep, store)  # validates manifests, models and captions before anything runs
    address = ray or sweep.ray.get("address")
    todo = [(d, m, name) for d in sweep.datasets for name, (m, _) in plan.probes.items()
            if (d.name, name) not in plan.done_pairs]
    out = {"runs_computed": 0, "runs_done_before": 0, "pairs_skipped": len(sweep.datasets) * len(sweep.models)
           - len(todo), "items_embedded": 0, "analysis": None}
    if out["pairs_skipped"]:
        log(f"sweep: {out['pairs_skipped']} dataset×model pair(s) already complete, skipped")
    a = sweep.analyze
    session = None
    if address and (todo or a.get("enabled", True)):
        from .batch.ray_backend import RaySession

        session = RaySession(address)
    with session or nullcontext():
        for d, models in _groups(sweep, todo):
            m = models[0][0]
            kwargs = {}
            if session is not None:
                from .batch.ray_backend import ray_job

                kwargs["job_cls"] = ray_job(
                    session, gpus_per_model=sweep.ray.get("gpus_per_model") if gpus_per_model is None
                    else gpus_per_model, replicas=sweep.ray.get("replicas", 1), decoders=sweep.ray.get("decoders"))
            log(f"sweep: {d.name} × {', '.join(name for _, name in models)}")
            s = run_precompute(store=store, manifest=plan.manifests[d.name], dataset=d.name,
                               models=[mm.source for mm, _ in models], names=[name for _, name in models],
                               modality=m.modality, progress=progress, unused_mllm_flags="note",
                               **sweep.model_options(m), **kwargs)
            out["runs_computed"] += s.runs_computed
            out["runs_done_before"] += s.runs_done_before
            out["items_embedded"] += s.items_embedded
        if a.get("enabled", True):
            from analysis.studies import analyze_store, default_jobs

            executor = None
            if session is not None:  # pairs scored in Ray tasks
                from .batch.ray_backend import analysis_executor

                executor = analysis_executor(session)
            options = analyze_options(sweep, default_jobs())
            out["analysis"] = analyze_store(store, options, progress=progress, log=log, executor=executor)
    out["seconds"] = time.perf_counter() - t0
    return out
