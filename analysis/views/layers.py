"""Layer labels for every page: a stored layer is a number (its index, 0 = the first stored layer:
:func:`layer_zero_text` says what it is) or a named
layer (``default``: the model's own pooled output, ``joint``: a dual encoder's projection), stored
after the last numbered one. A named layer has no relative depth: it is not "deeper" than the last
hidden state, so it is drawn and listed by its name, never at depth ``index / last`` (> 1)."""

from __future__ import annotations

import json

from analysis.views.store_info import query_frame


def names_of(config) -> dict[int, str]:
    """``{layer index: name}`` from a run's config (a dict or its JSON text; ``{}`` when none)."""
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except json.JSONDecodeError:
            return {}
    return {int(i): str(n) for i, n in ((config or {}).get("layer_names") or {}).items()}


def run_layer_names(con, dataset) -> dict[str, dict[int, str]]:
    """``{run_id: {layer index: name}}`` of the runs of ``dataset`` (runs without named layers map to ``{}``)."""
    runs = query_frame(con, "SELECT run_id, config FROM runs WHERE dataset = ?", [dataset])
    return {r: names_of(c) for r, c in zip(runs["run_id"], runs["config"])}


#: what layer 0 of a run is, by how precompute read its layers (:func:`layer_zero_text`)
LAYER_ZERO = {"stem": "the stem's output", "embeddings": "the embedding output",
              "block_input": "the first block's input", "unknown": "the first stored layer"}


def layer_zero_text(config) -> str:
    """What layer 0 of a run is, in words, from its stored config (a dict or its JSON text) alone:

    - ``feature_maps`` recorded (the hook path pooled 4-D stage outputs: a CNN such as a timm
      EfficientNet): layer 0 is the first stage's input, ``"the stem's output"``;
    - ``extraction_path`` ``hooks`` without feature maps (timm / open_clip / remote-code blocks of tokens):
      layer 0 is what the hooks record, ``"the first block's input"``;
    - the extraction version recorded without a hook path (transformers' own ``hidden_states``, layer 0 =
      ``hidden_states[0]``, :mod:`precompute.adapters.hf`): ``"the embedding output"``;
    - anything else (a hand-written store, an empty config): ``"the first stored layer"``, never a guess."""
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except json.JSONDecodeError:
            config = None
    config = config if isinstance(config, dict) else {}
    if config.get("feature_maps"):
        return LAYER_ZERO["stem"]
    if config.get("extraction_path") == "hooks":
        return LAYER_ZERO["block_input"]
    if "extraction" in config and "extraction_path" not in config:
        return LAYER_ZERO["embeddings"]
    return LAYER_ZERO["unknown"]


def run_layer_zero(con, dataset) -> dict[str, str]:
    """``{run_id: what its layer 0 is}`` (:func:`layer_zero_text`) of the runs of ``dataset``."""
    runs = query_frame(con, "SELECT run_id, config FROM runs WHERE dataset = ?", [dataset])
    return {r: layer_zero_text(c) for r, c in zip(runs["run_id"], runs["config"])}


def layer_label(layer, names: dict | None) -> str:
    """``"default"`` / ``"joint"`` for a named layer, else the index as text (``""`` for none)."""
    if layer is None:
        return ""
    names = {int(k): v for k, v in (names or {}).items()}
    return names.get(int(layer), str(int(layer)))


def axis_label_expr(names: dict | None) -> str:
    """A Vega ``labelExpr`` that writes a named layer's name for its index on an ordinal layer axis
    (``"datum.label"`` when none is named), so an axis shows ``default`` / ``joint``, not 5, 6."""
    import json

    names = {str(int(k)): str(v) for k, v in (names or {}).items()}
    return f"({json.dumps(names)})[datum.label] || datum.label" if names else "datum.label"


def relative_depth(layer: int, last: int | None, names: dict | None) -> float | None:
    """``layer / last`` in [0, 1] for a numbered layer (``last``: the last numbered layer, 0 = the
    embeddings), ``None`` for a named layer or one past ``last`` (it has no depth)."""
    names = {int(k): v for k, v in (names or {}).items()}
    if int(layer) in names or (last is not None and int(layer) > int(last)):
        return None
    return int(layer) / max(1, int(last or 0))


def last_numbered(n_layers: int, names: dict | None) -> int:
    """The last numbered layer of a run of ``n_layers`` stored layers (named ones are stored last)."""
    named = {int(k) for k in (names or {})}
    numbered = [i for i in range(int(n_layers)) if i not in named]
    return max(numbered) if numbered else int(n_layers) - 1


def layer_order(labels) -> list[str]:
    """Layer labels in drawing order: numbered ones by index, then the named ones (``default``,
    ``joint``) by name, each once, for an ordinal axis shared by models of different depths."""
    labels = set(map(str, labels))
    numbered = sorted((x for x in labels if x.isdigit()), key=int)
    return numbered + sorted(labels - set(numbered))
