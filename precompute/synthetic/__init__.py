"""Fixtures and the demo's data: synthetic videos and stores, tiny random models, packaged weights and images."""
