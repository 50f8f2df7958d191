"""Cost data collection on real FBGEMM kernels, features, and the cost models."""
