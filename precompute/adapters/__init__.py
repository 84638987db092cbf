"""Model adapters: Hugging Face models (hf), hook-based and standalone loaders (hooked), which one takes a
``--model`` (dispatch), forward hooks and pooling (hooks), sentence-transformers heads, remote code, and
what the store records about a model (model_info, naming). Only the adapters import torch."""
