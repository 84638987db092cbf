"""LayerScope precompute: decode videos, run Hugging Face models, store every layer in DuckDB.

This is the only package that imports torch (lazily, inside the modules that need it).
"""

__version__ = "0.1.0"
