"""The science as pure functions over arrays and result rows: scaling fits, temporal probes, same-space
metrics, predictors, layer choice, embedding and model maps, downstream correlation, grid comparison."""
