"""The Prometheus registry and collectors (built with the operator)."""
