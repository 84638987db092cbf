"""Read-only views of a store for the dashboard and the reports: plain functions, no Streamlit.

Every function takes an open DuckDB connection and returns pandas DataFrames or dicts ready to
draw. Values chosen by a user (query parameters, widgets) are validated here against what the
store holds before they reach any query, and queries are parameterised.

One module per page or job (overview, heatmap, curves, scaling, model map in studies, downstream,
probes, predictors, temporal, paper_figures, neighbours, embedding_map), each ending in
``section(con, dataset, **choices)`` where the report shows it too (:mod:`analysis.views.section`),
over shared ones (text, choices, charts, store_info, metric_help, layers). Import the module you
need: this package re-exports nothing."""
