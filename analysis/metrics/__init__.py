"""Public metric functions. Each takes numpy arrays and keyword-only hyperparameters and returns a float."""

from analysis.metrics.cca import svcca
from analysis.metrics.distribution import frechet, mmd
from analysis.metrics.kernel import cka
from analysis.metrics.knn import cknna, cycle_knn, mutual_knn
from analysis.metrics.retrieval import alignment, mean_ap, median_rank, modality_gap, partner_ranks, recall_at_k, retrieval
from analysis.metrics.single import lid, lid_pointwise, rankme, uniformity

__all__ = [
    "alignment", "cka", "cknna", "cycle_knn", "frechet", "lid", "lid_pointwise", "mean_ap",
    "median_rank", "mmd", "modality_gap", "mutual_knn", "partner_ranks", "rankme", "recall_at_k",
    "retrieval", "svcca", "uniformity",
]
