"""simstudy: a study harness for the network traffic of distributed deep-learning training."""

__version__ = "0.1.0"

__all__ = ["__version__"]
