"""Read-only views of a store for the dashboard and the reports: plain functions, no Streamlit.

Every function takes an open DuckDB connection and returns pandas DataFrames or dicts ready to
draw. Values chosen by a user (query parameters, widgets) are validated here against what the
store holds before they reach any query, and queries are parameterised.

One module per page or job (heatmap, curves, verdicts, scaling, studies, neighbours, predictors,
embedding_map) over shared ones (text, choices, charts, store_info, metric_help); pages import the
module they draw. The names are re-exported here for the report and older callers."""

from __future__ import annotations

from analysis.views.text import md_escape, fmt_number  # noqa: F401
from analysis.views.choices import Choice, choose, selection_to_layers, layers_from_params  # noqa: F401
from analysis.views.charts import chart_title, export_name, plot_height  # noqa: F401
from analysis.views.store_info import is_layerscope_store, has_table, stale_results, overview, untrained_banner, display_table, model_labels, provenance, dataset_context, study  # noqa: F401
from analysis.views.metric_help import metric_direction, chance_level, metric_help, baselines, baseline_rules  # noqa: F401
from analysis.views.null import grid_null, null_text, curve_null_levels, null_levels_text  # noqa: F401
from analysis.views.heatmap import PAIR_KINDS, pair_kinds, pair_kind_label, budget_pickers, grid_index, grid_by_id, grid_long, near_best_cells, best_cell_text, selected_cell_text, beyond_null_cells, null_rule_text  # noqa: F401
from analysis.views.curves import profiles_long, flag_lines, layer_choices, curve_intervals, alignment_curves_long, recommended_marks, curves_chart, named_layer_rows, named_layers_text, budget_text, uncertainty_text, chosen_curves, metric_rows, is_alignment_curve, metric_curves  # noqa: F401
from analysis.views.store_info import text_only, vision_results_missing  # noqa: F401
from analysis.views.layers import (axis_label_expr, layer_label, layer_order, relative_depth, run_layer_names,  # noqa: F401
                                   names_of)
from analysis.views.verdicts import VERDICT_RULE, verdicts  # noqa: F401
from analysis.views.scaling import SATURATING_TITLE, drawn_forms, saturating_param_rows, scaling_heading, scaling_fit_lines, scaling_subjects, scaling_view, scaling_panels, scaling_title, scaling_uncertainty_text, budget_lists  # noqa: F401
from analysis.views.studies import model_map_view, model_map_charts  # noqa: F401
from analysis.views.downstream import downstream_view, scatter_frame, fit_line_verdict, MIN_LINE_N  # noqa: F401
from analysis.views.temporal import temporal_view, tot_chart, tot_uncertainty_text, arrow_uncertainty_text, reorder_charts, reorder_drop_text  # noqa: F401
from analysis.views.neighbours import items, runs_for_neighbours, neighbours  # noqa: F401
from analysis.views.predictors import predictor_task_label, predictors_tables, predictor_matrix, rho_chart  # noqa: F401
from analysis.views.embedding_map import embedding_maps, MAX_COLOUR_LEVELS, categorical_metadata, embedding_map_points, map_command, map_modality_gap, gap_text  # noqa: F401
from analysis.views.nuance import same_space_studies  # noqa: F401
