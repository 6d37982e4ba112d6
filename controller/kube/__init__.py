"""Kubernetes I/O only: rule watch, status writes, events, leases, scale subresource."""
