"""Storage: the DuckDB schema (the one module that owns the tables), connections, result tables, imports."""
