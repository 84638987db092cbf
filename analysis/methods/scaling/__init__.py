"""Test-time scaling laws: alignment as a function of the frames and captions given at test time.

Main form (video–text alignment paper): ``S(n_f, n_c) = S∞ − (C_f n_f^−α + C_c n_c^−β)``, fitted by
bounded least squares by variable projection: the law is linear in S∞ and the C's once the exponents
are fixed, so those are solved exactly (under their bounds) on a zooming grid of exponents —
deterministic, and fast even where the optimum sits on a bound. Beyond the paper's in-sample R², we report
held-out error (leave-one-out and small-budgets-predict-large) and compare other functional forms.

Trust: S∞ is kept inside the metric's range (``bounds``), lower-is-better metrics use the law with
its sign flipped (``S∞ + C_f n_f^−α + C_c n_c^−β``, the score falls towards S∞), and every fit
carries a ``status`` saying whether its parameters mean anything (see :data:`STATUSES`).

One step per module, each importing only the ones above it:

- :mod:`.forms`: the law forms (:data:`FORMS`) and predictions of a stored fit;
- :mod:`.solver`: fitting (:func:`fit_scaling_law`, :func:`refit_many`) and each fit's status;
- :mod:`.heldout`: held-out error and the choice between forms (:func:`compare_forms`);
- :mod:`.intervals`: bootstrap intervals of the parameters and the ones the data leave undetermined.

The public names are re-exported here; private helpers are imported from their module.
"""

from .forms import FORMS, LawForm, predict_from_params
from .heldout import compare_forms, extrapolation_rmse, leave_one_out_rmse
from .intervals import ParamIntervals, bootstrap_params, grid_score_samples, undetermined_params
from .solver import EXPONENT_ATOL, JAC_COND_MAX, STATUSES, ScalingFit, TooFewPoints, fit_scaling_law, refit_many

__all__ = ["EXPONENT_ATOL", "FORMS", "JAC_COND_MAX", "STATUSES", "LawForm", "ParamIntervals", "ScalingFit",
           "TooFewPoints", "bootstrap_params", "compare_forms", "extrapolation_rmse", "fit_scaling_law",
           "grid_score_samples", "leave_one_out_rmse", "predict_from_params", "refit_many", "undetermined_params"]
