"""Import users' downstream results (CSV) into the store, validated row by row.

Columns: ``model, task, metric, value, higher_is_better`` and, optionally, ``layer`` (an integer
index in ``hidden_states`` numbering, or ``default`` / ``joint``, resolved to an index through the
model's run config ``layer_names``; empty: the model as a whole) and ``setting`` (how the task was
run, e.g. ``linear-probe``; empty when not given). Every problem is one line naming the file, the
line and the column; nothing is imported unless every row is good.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from analysis.storage.schema import MODEL_LEVEL, create_all
from analysis.storage.store import StoreError, check_store_path, connect, transaction

COLUMNS = ("model", "task", "metric", "value", "higher_is_better")
OPTIONAL = ("layer", "setting")
#: layer names a CSV may use instead of an index (stored after the numbered layers)
LAYER_NAMES = ("default", "joint")


@dataclass
class ModelLayers:
    """What the store knows about a model's layers: ``n_layers`` stored per run, and each named
    layer's index from its runs' config ``layer_names`` (``conflicts``: names whose runs disagree)."""

    n_layers: int | None = None
    names: dict = field(default_factory=dict)
    conflicts: dict = field(default_factory=dict)


def model_layers(con) -> dict[str, ModelLayers]:
    """``{model: ModelLayers}`` from the store's models and runs (run configs name the layers)."""
    out = {m: ModelLayers(n) for m, n in con.execute("SELECT model, n_layers FROM models").fetchall()}
    for model, n_layers, config in con.execute("SELECT model, n_layers, config FROM runs").fetchall():
        info = out.setdefault(model, ModelLayers(n_layers))
        info.n_layers = max(info.n_layers or 0, n_layers or 0) or None
        names = (json.loads(config) if config else {}).get("layer_names") or {}
        for idx, name in names.items():
            if name in info.names and info.names[name] != int(idx):
                info.conflicts.setdefault(name, {info.names[name]}).add(int(idx))
            info.names.setdefault(name, int(idx))
    return out


def parse_layer(text, model: str, info: ModelLayers | None) -> tuple[int, str | None]:
    """``(layer index, layer name or None)`` of a CSV ``layer`` cell; raises ValueError saying why not.

    Empty: :data:`analysis.storage.schema.MODEL_LEVEL` (the model as a whole)."""
    raw = (text or "").strip()
    if not raw:
        return MODEL_LEVEL, None
    if raw.lower() in LAYER_NAMES:
        name = raw.lower()
        if info is None or name not in info.names:
            have = ", ".join(f"{n}={i}" for n, i in sorted((info.names if info else {}).items())) or "none"
            raise ValueError(f"model {model!r} has no layer named {name!r} (its runs' layer_names: {have}); "
                             "give the layer's index, or precompute the model with its named layers")
        if name in info.conflicts:
            raise ValueError(f"model {model!r}: runs disagree on which layer is {name!r} "
                             f"({sorted(info.conflicts[name])}); give the index instead")
        return info.names[name], name
    if not _INDEX.fullmatch(raw):  # int() would take "1_0" and non-ASCII digits
        raise ValueError(f"{raw!r} is not a layer index (0, 1, ...) or one of {', '.join(LAYER_NAMES)}")
    idx = int(raw)
    if idx < 0:
        raise ValueError(f"layer {idx} is negative; layers count from 0 (the embedding output)")
    if info is not None and info.n_layers and idx >= info.n_layers:
        raise ValueError(f"layer {idx} is past the last layer of model {model!r} ({info.n_layers - 1})")
    return idx, None
#: a CSV number as a spreadsheet writes it: ASCII digits, an optional sign, point and exponent.
#: float() also takes "1_000", "١٢" (Arabic-Indic digits), "nan" and "inf", none of which a results
#: table should hold (a digit group separator or another script's digits is a sign of a mangled file)
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_INDEX = re.compile(r"[+-]?[0-9]+")


def parse_value(text) -> float:
    """A CSV ``value`` cell as a finite float; raises ValueError for anything :data:`_NUMBER` refuses."""
    raw = (text or "").strip()
    if not _NUMBER.fullmatch(raw):
        raise ValueError(raw)
    value = float(raw)
    if not math.isfinite(value):  # 1e999
        raise ValueError(raw)
    return value


TRUE = {"true", "1", "yes", "y", "t"}
FALSE = {"false", "0", "no", "n", "f"}


def parse_downstream_csv(path, known_models) -> list[dict]:
    """Rows of a results CSV; raises ValueError listing every problem with its line and column.

    ``known_models``: the store's model names, or ``{model: ModelLayers}`` (:func:`model_layers`),
    which a ``layer`` column needs to resolve named layers and check indices."""
    layers = known_models if isinstance(known_models, dict) else {}
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path} does not exist")
    problems, rows, seen, direction = [], [], {}, {}
    data = path.read_bytes()
    try:  # utf-8-sig: spreadsheet programs start UTF-8 CSVs with a byte-order mark
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ValueError(f"{path}: line {line} is not UTF-8 text (byte 0x{data[exc.start]:02x}); save the CSV as "
                         "UTF-8 and import again (nothing was imported)") from None
    with io.StringIO(text, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(missing)}; expected {', '.join(COLUMNS)} "
                             f"(optional: {', '.join(OPTIONAL)})")
        twice = sorted({c for c in reader.fieldnames if c and reader.fieldnames.count(c) > 1})
        if twice:  # a row would keep only the last of the two cells, silently
            raise ValueError(f"{path}:1: column(s) {', '.join(map(repr, twice))} appear more than once in the "
                             "header; keep one of each (nothing was imported)")
        width = len(reader.fieldnames)
        for r in reader:
            no = reader.line_num  # the physical line the row ends on (a quoted cell may span lines)
            where = f"{path}:{no}"
            if None in r:  # DictReader puts fields past the header's under the key None
                problems.append(f"{where}: {width + len(r[None])} fields, the header has {width} "
                                f"({', '.join(reader.fieldnames)}); remove the extra field(s) or quote a value "
                                "holding a comma")
                continue
            model = (r["model"] or "").strip()
            if model not in known_models:
                problems.append(f"{where}: column 'model': unknown model {model!r} "
                                f"(store models: {', '.join(sorted(known_models)) or 'none'})")
            task, metric = (r["task"] or "").strip(), (r["metric"] or "").strip()
            if not task:
                problems.append(f"{where}: column 'task' is empty")
            if not metric:
                problems.append(f"{where}: column 'metric' is empty")
            try:
                value = parse_value(r["value"])
            except ValueError:
                problems.append(f"{where}: column 'value': {r['value']!r} is not a finite number written with "
                                "ASCII digits 0-9 (optional sign, decimal point, exponent; no digit grouping)")
                value = None
            hib = (r["higher_is_better"] or "").strip().lower()
            if hib not in TRUE | FALSE:
                problems.append(f"{where}: column 'higher_is_better': {r['higher_is_better']!r} is not true/false")
            setting = (r.get("setting") or "").strip()
            try:
                layer, layer_name = parse_layer(r.get("layer"), model,
                                                layers.get(model) if model in known_models else None)
            except ValueError as exc:
                problems.append(f"{where}: column 'layer': {exc}")
                layer, layer_name = None, None
            if hib in TRUE | FALSE and task and metric:  # one direction per task: correlations depend on it
                first = direction.setdefault((task, metric), (hib in TRUE, no))
                if first[0] != (hib in TRUE):
                    problems.append(f"{where}: column 'higher_is_better': {hib!r} contradicts line {first[1]} "
                                    f"for task {task!r} ({metric})")
            k = (model, task, metric, setting, layer)
            if k in seen:
                problems.append(f"{where}: duplicate of line {seen[k]} (same model, task, metric, setting, layer)")
            seen[k] = no
            rows.append({"model": model, "task": task, "metric": metric, "setting": setting, "layer": layer,
                         "layer_name": layer_name, "value": value, "higher_is_better": hib in TRUE})
    if problems:
        raise ValueError(f"{path} has {len(problems)} problem(s); nothing was imported:\n  " + "\n  ".join(problems))
    if not rows:
        raise ValueError(f"{path} has no rows")
    return rows


def import_downstream(store, path) -> int:
    """Validate, then replace rows with the same (model, task, metric, setting, layer) in one transaction."""
    check_store_path(store, must_exist=True)  # a mistyped path must not become a new, empty store
    con = connect(store, read_only=False)
    try:
        create_all(con, str(store))
        known = model_layers(con)
        if not known:
            raise StoreError(f"{store} has no models yet; precompute first")
        rows = parse_downstream_csv(path, known)
        now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
        with transaction(con):
            for r in rows:
                key = [r["model"], r["task"], r["metric"], r["setting"], r["layer"]]
                con.execute("DELETE FROM downstream_results WHERE model = ? AND task = ? AND metric = ? "
                            "AND setting = ? AND layer = ?", key)
                con.execute("INSERT INTO downstream_results (model, task, metric, setting, layer, layer_name, "
                            "value, higher_is_better, source, imported) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            key + [r["layer_name"], r["value"], r["higher_is_better"],
                                   str(Path(path).resolve()), now])
        return len(rows)
    finally:
        con.close()
