"""queuescale: scale queue workers from the length of their queues."""

__version__ = "0.1.0"
