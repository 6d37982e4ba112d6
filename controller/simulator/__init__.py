"""A virtual clock plus simulated sources and targets that plug into the same reconciler."""
