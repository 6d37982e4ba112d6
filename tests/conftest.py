"""Shared fixtures: a real Azurite (tests/azurite.py) and helpers to poll it."""

from tests.azurite import azurite, own_azurite

__all__ = ["azurite", "own_azurite"]
