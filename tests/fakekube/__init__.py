"""A faithful fake kube-apiserver for the operator's tests (see `server.FakeKube`)."""

from tests.fakekube.server import FakeKube, Fault

__all__ = ["FakeKube", "Fault"]
