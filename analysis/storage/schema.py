"""The one module that owns LayerScope's DuckDB tables: DDL, a comment per column, the version.

No torch imports: the dashboard, the analysis studies and precompute all use it. Result tables
written by later studies are added here too, so one file describes the whole store.
"""

from __future__ import annotations

import duckdb

#: Bumped whenever a table or column changes meaning; a store of another version is refused.
#: 3: embeddings moved from one BLOB per (run, layer, batch) to one fixed-width FLOAT[dim] row per
#: (run, layer, item) in a table per width (``layerscope migrate`` upgrades a version-2 store).
#: 4: result tables gained ``flags`` (degenerate layers, why a grid has no best cell, notes per
#: layer); ``layerscope migrate`` adds the columns to a version-3 store.
#: 5: ``downstream_results`` gained ``setting``, ``layer`` and ``layer_name`` (per-layer results) and
#: the primary key ``(model, task, metric, setting, layer)``; ``layerscope migrate`` rebuilds the
#: table of a version-2/3/4 store, its rows becoming whole-model rows (``setting`` '', ``layer`` -1).
SCHEMA_VERSION = 5

#: ``downstream_results.layer`` of a result about the model as a whole (not one of its layers): a
#: primary-key column cannot be NULL, and no layer index is negative
MODEL_LEVEL = -1

# (table, [(column, type, comment)], table constraints)
TABLES: list[tuple[str, list[tuple[str, str, str]], str]] = [
    ("meta", [
        ("key", "VARCHAR PRIMARY KEY", "setting name, e.g. schema_version"),
        ("value", "VARCHAR", "setting value as text"),
    ], ""),
    ("datasets", [
        ("dataset", "VARCHAR PRIMARY KEY", "dataset name given with --dataset"),
        ("manifest", "VARCHAR", "absolute path of the manifest it was read from"),
        ("manifest_sha", "VARCHAR", "sha256 of the manifest's normalised items (ids, videos, captions)"),
        ("n_items", "INTEGER", "number of items"),
        ("created", "TIMESTAMP", "when the dataset was first stored"),
    ], ""),
    ("items", [
        ("dataset", "VARCHAR", "dataset name"),
        ("idx", "INTEGER", "0-based position in the manifest: the row order of every embedding array"),
        ("item_id", "VARCHAR", "the manifest's id"),
        ("video", "VARCHAR", "absolute path of the video file, frame folder or image; NULL in a text-only dataset"),
        ("captions", "VARCHAR[]", "captions in manifest order (n_c takes the first n_c)"),
        ("negatives", "VARCHAR[]", "captions describing the same events in another order (may be empty)"),
        ("metadata", "JSON", "any other manifest fields, as JSON"),
    ], "PRIMARY KEY (dataset, idx)"),
    ("models", [
        ("model", "VARCHAR PRIMARY KEY", "name in the store (--name, else hub id, else folder name)"),
        ("source", "VARCHAR", "hub id or absolute local path passed as --model"),
        ("revision", "VARCHAR", "hub commit hash or a hash of the local weights"),
        ("model_type", "VARCHAR", "transformers config.model_type"),
        ("modality", "VARCHAR", "video | image | text | mllm"),
        ("n_layers", "INTEGER", "stored layers including layer 0 (embedding output)"),
        ("dim", "INTEGER", "embedding width"),
        ("params", "BIGINT", "number of parameters"),
        ("native_frames", "INTEGER", "clip length the video model was built for (NULL otherwise)"),
        ("pooling", "VARCHAR", "cls | mean | last_token"),
        ("random_init", "BOOLEAN", "true for randomly initialised (untrained) weights"),
        ("config", "JSON", "the model's config as JSON"),
    ], ""),
    ("runs", [
        ("run_id", "VARCHAR PRIMARY KEY", "hash of everything that changes the numbers"),
        ("model", "VARCHAR", "models.model"),
        ("dataset", "VARCHAR", "datasets.dataset"),
        ("modality", "VARCHAR", "video | image | text | mllm (what was embedded)"),
        ("n_frames", "INTEGER", "frames per video (vision runs; NULL for text)"),
        ("n_captions", "INTEGER", "captions concatenated per item (text runs; NULL for vision)"),
        ("variant", "VARCHAR", "original | reversed (time-reversed video) | negative (first negative caption) | "
                               "long_caption (the item's long original caption, n_c = 1)"),
        ("image_mode", "VARCHAR", "image models: frames (average of sampled frames) | first (first frame only)"),
        ("pooling", "VARCHAR", "cls | mean | last_token"),
        ("dtype", "VARCHAR", "compute dtype: float32 | bfloat16 | float16 (stored vectors are float32)"),
        ("device", "VARCHAR", "device the run was computed on"),
        ("status", "VARCHAR", "running | done; done only once every item of every layer is written"),
        ("n_items", "INTEGER", "items the run covers"),
        ("n_done", "INTEGER", "items written so far (resume starts here)"),
        ("n_layers", "INTEGER", "layers stored per item"),
        ("dim", "INTEGER", "vector width"),
        ("config", "JSON", "full run configuration, including notes on how odd inputs were handled"),
        ("code_version", "VARCHAR", "layerscope version that computed it"),
        ("started", "TIMESTAMP", "first start"),
        ("finished", "TIMESTAMP", "when it became done"),
    ], ""),
    ("run_tags", [
        ("run_id", "VARCHAR", "runs.run_id (tags of a removed run go with it; a renamed model's runs keep theirs)"),
        ("tag", "VARCHAR", "a label the user gave the run (`layerscope runs tag RUN TAG`): no spaces or commas"),
        ("added", "TIMESTAMP", "when the tag was added"),
    ], "PRIMARY KEY (run_id, tag)"),
    ("downstream_results", [
        ("model", "VARCHAR", "models.model the result belongs to"),
        ("task", "VARCHAR", "downstream task, e.g. ssv2 or depth"),
        ("metric", "VARCHAR", "the task's metric, e.g. top1 or rmse"),
        ("setting", "VARCHAR NOT NULL", "how the task was run (e.g. linear-probe, 16 frames); '' when not given"),
        ("layer", "SMALLINT NOT NULL", ("layer index the result was measured on (hidden_states numbering; "
                                        "named layers resolved through the run config's layer_names); "
                                        "-1: the model as a whole")),
        ("layer_name", "VARCHAR", "default | joint when the CSV named the layer; NULL otherwise"),
        ("value", "DOUBLE", "the result"),
        ("higher_is_better", "BOOLEAN", "false for errors (rmse, ...): correlations flip the sign"),
        ("source", "VARCHAR", "CSV file it was imported from"),
        ("imported", "TIMESTAMP", "when it was imported"),
    ], "PRIMARY KEY (model, task, metric, setting, layer)"),
    ("paper_names", [
        ("kind", "VARCHAR", "model | dataset: which of the store's names this maps"),
        ("name", "VARCHAR", "models.model or datasets.dataset as stored"),
        ("paper_name", "VARCHAR", "the name analysis/data/papers.csv gives it (e.g. VideoMAEv2-H, VATEX)"),
        ("set", "TIMESTAMP", "when the mapping was set (layerscope papers map)"),
    ], "PRIMARY KEY (kind, name)"),
    ("result_grids", [
        ("result_id", "VARCHAR PRIMARY KEY", "hash of the inputs' run ids and the parameters"),
        ("dataset", "VARCHAR", "datasets.dataset"),
        ("pair_kind", "VARCHAR", "vision_text | vision_vision | text_text (same-modality pairs at equal budgets)"),
        ("model_a", "VARCHAR", "rows: vision model (text_text: the first text model by name)"),
        ("model_b", "VARCHAR", "columns: text model (or second vision model, or second text model)"),
        ("run_a", "VARCHAR", "runs.run_id of the rows"),
        ("run_b", "VARCHAR", "runs.run_id of the columns"),
        ("n_frames", "INTEGER", "frames of the vision run (rows; NULL for text_text)"),
        ("n_captions", "INTEGER", "captions of the text run (both runs' for text_text; NULL for vision_vision)"),
        ("n_frames_b", "INTEGER", "frames of the second vision run (vision_vision only)"),
        ("metric", "VARCHAR", "registry metric name"),
        ("params", "JSON", "metric parameters (k, ...) and clamp_quantile when the outlier clamp was on"),
        ("n_rows", "INTEGER", "layers of model_a"),
        ("n_cols", "INTEGER", "layers of model_b"),
        ("grid_values", "DOUBLE[]", "row-major n_rows x n_cols scores"),
        ("best_a", "INTEGER", "layer of model_a in the best cell"),
        ("best_b", "INTEGER", "layer of model_b in the best cell"),
        ("best_value", "DOUBLE", "score of the best cell"),
        ("ci_low", "DOUBLE", "bootstrap lower bound of the best cell (items resampled)"),
        ("ci_high", "DOUBLE", "bootstrap upper bound of the best cell"),
        ("n_boot", "INTEGER", "bootstrap resamples behind the interval (0: none)"),
        ("flags", "JSON", "degenerate input: {degenerate_a/_b: {layer: reason}, best: why no best cell "
                          "(best_* NULL), interval: why no interval, best_caveat: a best layer that keeps "
                          "few of the distinctions its run's other layers make}; {} when healthy; and "
                          "null: {p, q95, n_perm, grouped}, the best cell's shuffled-pairing null "
                          "(analysis/null.py) when --null-perms > 0, else null_skipped: why none; knn (--knn ann): "
                          "{knn, knn_recall per layer, knn_recall_min, knn_recall_rows, recall_low: "
                          "set when the lowest recall is below analysis.metrics.knn.RECALL_FLOOR}"),
        ("input_key", "VARCHAR", "hash of the input runs' ids and finish times: a change means recompute"),
        ("computed", "TIMESTAMP", "when it was computed"),
    ], ""),
    ("result_profiles", [
        ("result_id", "VARCHAR PRIMARY KEY", "hash of the run id and the parameters"),
        ("dataset", "VARCHAR", "datasets.dataset"),
        ("model", "VARCHAR", "models.model"),
        ("run_id", "VARCHAR", "runs.run_id"),
        ("modality", "VARCHAR", "the run's modality"),
        ("n_frames", "INTEGER", "the run's n_f (NULL for text)"),
        ("n_captions", "INTEGER", "the run's n_c (NULL for vision)"),
        ("metric", "VARCHAR", "single-space registry metric name"),
        ("params", "JSON", "metric parameters"),
        ("layer_values", "DOUBLE[]", "one value per layer, layer 0 first (NaN where undefined)"),
        ("flags", "JSON", "{layer: note} for layers whose value needs one (collapsed layer, duplicates "
                          "merged for LID, why a value is undefined); {} when none"),
        ("input_key", "VARCHAR", "hash of the run id and finish time"),
        ("computed", "TIMESTAMP", "when it was computed"),
    ], ""),
    ("result_studies", [
        ("result_id", "VARCHAR PRIMARY KEY", "hash of the study, subject, inputs and parameters"),
        ("study", "VARCHAR", "scaling | model_map | downstream | temporal | layer_choice | predictors | ..."),
        ("dataset", "VARCHAR", "datasets.dataset"),
        ("subject", "VARCHAR", "what it is about, e.g. 'videomae|minilm|mutual_knn' or a model name"),
        ("params", "JSON", "parameters (k, metric, bootstrap resamples, seed)"),
        ("payload", "JSON", "the study's numbers (documented in analysis.studies)"),
        ("input_key", "VARCHAR", "hash of the inputs: a change means recompute"),
        ("computed", "TIMESTAMP", "when it was computed"),
    ], ""),
    # the result tables are caches keyed by settings: rows of an earlier analysis under other settings
    # (k, clamp, --knn, ...) stay beside the current ones. This lists the rows the current analysis of
    # each dataset computed or reused, so the dashboard and reports read one analysis, never a mix
    ("result_current", [
        ("result_table", "VARCHAR", "result_grids | result_profiles | result_studies"),
        ("result_id", "VARCHAR", "the row's result_id in that table"),
        ("dataset", "VARCHAR", "datasets.dataset (a dataset's list is replaced when it is analysed again)"),
    ], "PRIMARY KEY (result_table, result_id)"),
]

#: Embeddings: one row per (run, layer, item), in one table per vector width ``embeddings_<dim>``,
#: because DuckDB's fixed-size ``FLOAT[dim]`` arrays are stored and read as one contiguous float
#: buffer (Arrow ``FixedSizeList``): a run loads at a few times ``np.load`` (see bench/precompute.py),
#: where a variable-length ``FLOAT[]`` column or BLOBs copy element by element. The runs table says
#: which width (``runs.dim``) and so which table holds a run. No primary key: DuckDB keeps ART
#: indexes in memory, and the writer's per-batch transactions already keep rows unique.
EMBEDDING_COLUMNS: list[tuple[str, str, str]] = [
    ("run_id", "VARCHAR", "runs.run_id"),
    ("layer", "SMALLINT", "0 = embedding output, matching hidden_states indices"),
    ("idx", "INTEGER", "items.idx: the item's 0-based position in the manifest"),
    ("vec", "FLOAT[{dim}]", "the pooled embedding (float32 whatever the compute dtype)"),
]
EMBEDDING_PREFIX = "embeddings_"

TABLE_NAMES = [t[0] for t in TABLES]


def embedding_table(dim: int) -> str:
    """Name of the table holding ``dim``-wide vectors, e.g. ``embeddings_768``."""
    dim = int(dim)
    if dim < 1:
        raise ValueError(f"embedding width must be >= 1, got {dim}")
    return f"{EMBEDDING_PREFIX}{dim}"


def embedding_writer_settings(con: duckdb.DuckDBPyConnection) -> None:
    """Settings for a connection that writes embeddings: store floats uncompressed.

    DuckDB would pick ALP-RD for float columns, which saves ~10% on disk and costs ~20% on every
    load (bench/precompute.py): loads happen far more often than writes. ``FLOAT[dim]`` columns
    take no per-column ``USING COMPRESSION``, so this is the connection-wide setting.
    """
    con.execute("SET force_compression = 'uncompressed'")


def ensure_embedding_table(con: duckdb.DuckDBPyConnection, dim: int) -> str:
    """Create the table for ``dim``-wide vectors when missing (with column comments); returns its name."""
    name = embedding_table(dim)
    columns = [(c, t.format(dim=int(dim)), comment) for c, t, comment in EMBEDDING_COLUMNS]
    con.execute(_ddl(name, columns, ""))
    _comment(con, name, columns)
    return name


def embedding_tables(con: duckdb.DuckDBPyConnection) -> dict[int, str]:
    """``{dim: table}`` for every embeddings table in the store."""
    names = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()]
    return {int(n[len(EMBEDDING_PREFIX):]): n for n in names
            if n.startswith(EMBEDDING_PREFIX) and n[len(EMBEDDING_PREFIX):].isdigit()}


#: Older schema versions ``layerscope migrate`` can upgrade (see precompute.upkeep.migrate).
MIGRATABLE = (2, 3, 4)


class SchemaError(ValueError):
    """The store was written by another schema version, or is not a LayerScope store."""


def fetch_one(con: duckdb.DuckDBPyConnection, sql: str, args=None):
    """First row or None, with the result drained (DuckDB 2 results stream and block the
    connection until read to the end)."""
    rows = con.execute(sql, args or []).fetchall()
    return rows[0] if rows else None


def _ddl(name, columns, constraints) -> str:
    cols = [f"{c} {t}" for c, t, _ in columns]
    if constraints:
        cols.append(constraints)
    return f"CREATE TABLE IF NOT EXISTS {name} ({', '.join(cols)})"


def stored_version(con: duckdb.DuckDBPyConnection) -> int | None:
    """Schema version recorded in the store; None when the store has no LayerScope tables."""
    try:  # the common case first: one small query (the catalog listing below costs more than a load)
        rows = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
        return int(rows[0][0]) if rows else None
    except duckdb.CatalogException:
        pass
    have = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if have & set(TABLE_NAMES):
        raise SchemaError("store has LayerScope-like tables but no meta table: not written by LayerScope")
    return None


def check_version(con: duckdb.DuckDBPyConnection, path: str = "store") -> None:
    version = stored_version(con)
    if version is not None and version != SCHEMA_VERSION:
        raise SchemaError(
            f"{path} was written with store schema version {version}, this LayerScope reads version "
            f"{SCHEMA_VERSION}. Nothing was changed. "
            + (f"Upgrade it in place with `layerscope migrate --store {path}`."
               if version in MIGRATABLE else "Use a matching LayerScope version or a new store.")
        )


def _comment(con, table, columns) -> None:
    for column, _, comment in columns:
        con.execute(f"COMMENT ON COLUMN {table}.{column} IS '{comment.replace(chr(39), chr(39) * 2)}'")


def add_missing_columns(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Add the columns of :data:`TABLES` an older store lacks (nullable, with their comments);
    returns ``["table.column", ...]`` added. Used by ``layerscope migrate``."""
    have = {(t, c) for t, c in con.execute(
        "SELECT table_name, column_name FROM information_schema.columns").fetchall()}
    added = []
    for name, columns, _ in TABLES:
        if not any(t == name for t, _ in have):
            continue  # created whole by create_all
        for column, type_, comment in columns:
            if (name, column) not in have:
                con.execute(f"ALTER TABLE {name} ADD COLUMN {column} {type_.replace(' PRIMARY KEY', '')}")
                _comment(con, name, [(column, type_, comment)])
                added.append(f"{name}.{column}")
    return added


def table_ddl(name: str, as_name: str | None = None) -> str:
    """``CREATE TABLE`` of table ``name`` (under ``as_name`` when given, e.g. for a rebuild)."""
    for table, columns, constraints in TABLES:
        if table == name:
            return _ddl(as_name or name, columns, constraints)
    raise KeyError(f"no table {name!r} in the schema; tables: {', '.join(TABLE_NAMES)}")


def create_all(con: duckdb.DuckDBPyConnection, path: str = "store", *, comment_all: bool = False) -> None:
    """Create missing tables (with their column comments) and record the version; refuses a store
    of another version. ``comment_all``: comment every table's columns again (a migration that
    rebuilt tables)."""
    check_version(con, path)
    # only the missing tables: commenting every column of an existing store took ~0.1 s, paid on
    # every open for writing (analyze, precompute, imports)
    have = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'").fetchall()}
    for name, columns, constraints in TABLES:
        if name not in have:
            con.execute(_ddl(name, columns, constraints))
        if name not in have or comment_all:
            _comment(con, name, columns)
    con.execute(
        "INSERT INTO meta VALUES ('schema_version', ?) ON CONFLICT (key) DO NOTHING", [str(SCHEMA_VERSION)]
    )
