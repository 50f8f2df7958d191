"""Applying a plan: measuring it on real kernels (and, later, training with it)."""
