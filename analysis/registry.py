"""One registry of metrics: name → function, kind, direction, bounds and parameters.

The CLI (``layerscope metrics``), the grids, the dashboard pickers and the common tests all read it.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from analysis.metrics import (
    alignment, cka, cknna, cycle_knn, frechet, lid, mean_ap, median_rank, mmd, modality_gap,
    mutual_knn, rankme, recall_at_k, svcca, uniformity,
)
from analysis.metrics.base import FunctionKernel, PairKernel
from analysis.metrics.cca import _SVCCA
from analysis.metrics.kernel import _CKA
from analysis.metrics.knn import _CKNNA, _CYCLE, _MUTUAL

#: kinds of metric and what their inputs must satisfy
KINDS = {
    "pairwise": "two spaces of any dimensions, rows paired (same items)",
    "same_space": "two spaces of one dimension, rows paired",
    "unpaired": "two samples in one space; rows need not match",
    "single": "one space",
}


@functools.lru_cache(maxsize=None)
def _keyword_params(fn) -> tuple:
    sig = inspect.signature(fn)
    return tuple((n, p.default) for n, p in sig.parameters.items() if p.kind == inspect.Parameter.KEYWORD_ONLY)


@dataclass(frozen=True)
class MetricSpec:
    """What a metric is and how to call it."""

    name: str
    fn: Callable  # public function: fn(X[, Y], **params) -> float
    kind: str  # one of KINDS
    higher_is_better: bool | None  # None: no preferred direction (e.g. LID)
    bounds: tuple[float | None, float | None]  # inclusive; None = unbounded on that side
    summary: str
    reference: str = ""
    symmetric: bool = False  # f(X, Y) == f(Y, X)
    invariances: frozenset = field(default_factory=frozenset)  # "rotation", "scale"
    kernel: PairKernel | None = None  # two-stage implementation used by grids
    #: expected value on unrelated spaces (random neighbour lists / random ranking), as a function
    #: ``chance(n_items, **resolved_params)``; None where no chance level is defined
    chance: Callable | None = None

    @property
    def params(self) -> dict[str, object]:
        """Keyword-only hyperparameters and their defaults, read from the function signature
        (once per function: ``analyze`` asks for them per pair; a fresh copy each time)."""
        return dict(_keyword_params(self.fn))

    def resolve(self, **params) -> dict[str, object]:
        """Defaults overlaid with ``params``; unknown names raise and list what is accepted."""
        known = self.params
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise ValueError(
                f"metric {self.name!r} does not take {', '.join(unknown)}; "
                f"its parameters are: {', '.join(known) or '(none)'}"
            )
        return {**known, **params}

    def __call__(self, *arrays, **params) -> float:
        return float(self.fn(*arrays, **self.resolve(**params)))


_ROT_SCALE = frozenset({"rotation", "scale"})


def _chance_mutual(n, *, k, **_):
    # two independent uniformly random k-subsets of the n-1 other items share k*k/(n-1) on average
    return k / (n - 1)


def _chance_recall(n, *, k, **_):
    # the partner's rank is uniform on 1..n, so P(rank <= k) = k/n
    return min(k, n) / n


def _chance_map(n, **_):
    # mean of 1/rank for a rank uniform on 1..n: H_n / n
    return float(np.sum(1.0 / np.arange(1, n + 1)) / n)


def _chance_median_rank(n, **_):
    return (n + 1) / 2

_SPECS = [
    MetricSpec("mutual_knn", mutual_knn, "pairwise", True, (0.0, 1.0),
               "share of k nearest neighbours two spaces agree on", "Huh et al. 2024",
               symmetric=True, invariances=_ROT_SCALE, kernel=_MUTUAL, chance=_chance_mutual),
    MetricSpec("cycle_knn", cycle_knn, "pairwise", True, (0.0, 1.0),
               "share of items that return to themselves via Y- then X-neighbours", "Huh et al. 2024",
               invariances=_ROT_SCALE, kernel=_CYCLE),
    MetricSpec("cka", cka, "pairwise", True, (None, 1.0),
               "centred kernel alignment (linear or RBF; biased or debiased HSIC)", "Kornblith et al. 2019",
               symmetric=True, invariances=_ROT_SCALE, kernel=_CKA),
    MetricSpec("cknna", cknna, "pairwise", True, (None, None),
               "CKA restricted to mutual k-NN pairs", "Huh et al. 2024",
               # not symmetric: the k-NN mask is not, so 1'K~L~1 != 1'L~K~1 in general
               symmetric=False, invariances=_ROT_SCALE, kernel=_CKNNA),
    MetricSpec("svcca", svcca, "pairwise", True, (0.0, 1.0),
               "mean canonical correlation after SVD reduction", "Raghu et al. 2017",
               symmetric=True, invariances=_ROT_SCALE, kernel=_SVCCA),
    MetricSpec("recall_at_k", recall_at_k, "same_space", True, (0.0, 1.0),
               "share of queries whose partner ranks in the top k", "",
               invariances=_ROT_SCALE, kernel=FunctionKernel(recall_at_k), chance=_chance_recall),
    MetricSpec("mean_ap", mean_ap, "same_space", True, (0.0, 1.0),
               "mean average precision (the partner, or every item of its group, is relevant)", "",
               invariances=_ROT_SCALE, kernel=FunctionKernel(mean_ap), chance=_chance_map),
    MetricSpec("median_rank", median_rank, "same_space", False, (1.0, None),
               "median 1-based rank of the true partner", "",
               invariances=_ROT_SCALE, kernel=FunctionKernel(median_rank), chance=_chance_median_rank),
    MetricSpec("modality_gap", modality_gap, "same_space", False, (0.0, 2.0),
               "distance between the means of the L2-normalised modalities", "Liang et al. 2022",
               symmetric=True, invariances=_ROT_SCALE, kernel=FunctionKernel(modality_gap)),
    MetricSpec("alignment", alignment, "same_space", False, (0.0, None),
               "mean distance^alpha between normalised partners", "Wang & Isola 2020",
               symmetric=True, invariances=_ROT_SCALE, kernel=FunctionKernel(alignment)),
    MetricSpec("mmd", mmd, "unpaired", False, (None, None),
               "unbiased squared MMD with an RBF kernel", "Gretton et al. 2012",
               # scale-invariant with the default median-heuristic bandwidth (sigma=None)
               symmetric=True, invariances=_ROT_SCALE,
               kernel=FunctionKernel(mmd, paired=False)),
    MetricSpec("frechet", frechet, "unpaired", False, (0.0, None),
               "Fréchet distance between fitted Gaussians", "Heusel et al. 2017",
               symmetric=True, invariances=frozenset({"rotation"}),
               kernel=FunctionKernel(frechet, paired=False)),
    MetricSpec("rankme", rankme, "single", True, (1.0, None),
               "effective rank (entropy of normalised singular values)", "Garrido et al. 2023",
               invariances=_ROT_SCALE),
    MetricSpec("lid", lid, "single", None, (0.0, None),
               "local intrinsic dimension (MLE or TwoNN) via scikit-dimension", "Levina & Bickel 2004; Facco et al. 2017",
               invariances=_ROT_SCALE),
    MetricSpec("uniformity", uniformity, "single", False, (None, 0.0),
               "log mean Gaussian potential of normalised rows", "Wang & Isola 2020",
               invariances=_ROT_SCALE),
]

REGISTRY: dict[str, MetricSpec] = {s.name: s for s in _SPECS}

#: metric name -> (lo, hi) inclusive range, None where unbounded on that side (data for fits, charts)
BOUNDS: dict[str, tuple[float | None, float | None]] = {s.name: s.bounds for s in _SPECS}


def chance_level(metric: str, n_items: int, **params) -> float | None:
    """Expected value of ``metric`` on unrelated spaces with ``n_items`` items, or None where not
    defined. Mutual k-NN: ``k/(N-1)``; Recall@k: ``k/N``; mAP: ``H_N/N``; median rank: ``(N+1)/2``."""
    spec = get_metric(metric)
    if spec.chance is None:
        return None
    if n_items < 2:
        raise ValueError(f"chance level needs at least 2 items, got {n_items}")
    return float(spec.chance(int(n_items), **spec.resolve(**params)))


def metric_info(metric: str, n_items: int | None = None, **params) -> dict:
    """Plain data about a metric: ``{"name", "kind", "higher_is_better", "bounds": [lo, hi],
    "chance"}`` (``chance`` None without ``n_items`` or where undefined)."""
    spec = get_metric(metric)
    chance = None if n_items is None else chance_level(metric, n_items, **params)
    return {"name": spec.name, "kind": spec.kind, "higher_is_better": spec.higher_is_better,
            "bounds": list(spec.bounds), "chance": chance}


def get_metric(name: str) -> MetricSpec:
    """The spec for ``name``; an unknown name raises with "did you mean" and the choices."""
    try:
        return REGISTRY[name]
    except KeyError:
        close = difflib.get_close_matches(str(name), REGISTRY, n=3, cutoff=0.5)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(
            f"Unknown metric {name!r}.{hint} Choices: {', '.join(sorted(REGISTRY))}"
        ) from None


def metrics_of_kind(*kinds: str) -> list[MetricSpec]:
    return [s for s in _SPECS if s.kind in kinds]


#: where ``layerscope analyze`` computes each kind of metric, and where the results show
DESTINATIONS = {
    "pairwise": "layer x layer grids of every vision x text pair and every two vision models at one n_f "
                "(result_grids; Heatmap and Curves pages, scaling, model map)",
    "same_space": "every video run and text run that share one space: an MLLM's two sides at each layer, a dual "
                  "encoder's joint layers (result_studies, study same_space; Temporal page)",
    "unpaired": "between a model's video side and text side, per layer, wherever they share one space "
                "(result_studies, study same_space; Temporal page)",
    "single": "per-layer profiles of every run (result_profiles; Curves page, layer choice)",
}


def route_metrics(names) -> tuple[tuple[str, ...], list[str]]:
    """Split ``analyze --metric`` names by kind: ``(pairwise names for the grids, notes)``.

    Grids take the pairwise metrics asked for; every other kind is always computed where its data
    exists, so a note says where (:data:`DESTINATIONS`). An unknown name raises with "did you mean".
    """
    pairwise, notes = [], []
    for name in names or ():
        spec = get_metric(name)
        if spec.kind == "pairwise":
            if name not in pairwise:
                pairwise.append(name)
        else:
            notes.append(f"{name} is a {spec.kind} metric ({KINDS[spec.kind]}): analyze always computes it for "
                         f"{DESTINATIONS[spec.kind]}")
    return tuple(pairwise), notes
