"""LayerScope analysis: pure numpy/scipy functions over per-layer embeddings.

Nothing here imports torch or Streamlit. Arrays are ``(N, d)`` for one layer and
``(L, N, d)`` for a stack of layers; scores come back as plain ``float``.
"""

__version__ = "0.1.0"
