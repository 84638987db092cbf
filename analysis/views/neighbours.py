"""The neighbours page's data: items, runs, one item's nearest neighbours."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.metrics.neighbors import l2_normalize
from analysis.views.store_info import query_frame


def items(con, dataset) -> pd.DataFrame:
    return query_frame(con, "SELECT idx, item_id, video, captions FROM items WHERE dataset = ? ORDER BY idx", [dataset])


def runs_for_neighbours(con, dataset) -> pd.DataFrame:
    return query_frame(con, "SELECT run_id, model, modality, n_frames, n_captions, n_layers FROM runs WHERE dataset = ? "
                    "AND status = 'done' AND variant = 'original' ORDER BY model, n_frames, n_captions", [dataset])


def neighbours(con, run_id: str, layer: int, idx: int, k: int = 5) -> pd.DataFrame:
    """The k nearest items (cosine) to item ``idx`` in one layer of one run: one small query, one row of maths."""
    from analysis.storage.store import load_layer

    X, ids = load_layer(con, run_id, layer, with_idx=True)
    X = l2_normalize(X.astype(np.float64))
    pos = int(np.flatnonzero(ids == idx)[0])
    sims = X @ X[pos]
    sims[pos] = -np.inf
    order = np.argsort(-sims)[:k]
    return pd.DataFrame({"rank": np.arange(1, len(order) + 1), "idx": ids[order], "cosine": sims[order]})
