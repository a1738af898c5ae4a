"""The version of simstudy: ground-level vocabulary that every layer may import (DESIGN.md, layer 0)."""

__version__ = "0.1.0"
