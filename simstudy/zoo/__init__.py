"""Built-in models: explicit `simstudy.spec.Model` values, layer by layer.

    >>> from simstudy.zoo import build
    >>> build("resnet50", num_classes=10).params
    23528522

`ZOO` maps each name to its builder; `build(name, **options)` checks the options and builds;
`list_models()` summarises every model for `simstudy models`; `check_options(name, options)`
validates options without building.
"""

from __future__ import annotations

from simstudy.zoo.errors import ZooError
from simstudy.zoo.registry import (
    ZOO,
    Builder,
    ZooEntry,
    ZooOptionInfo,
    ZooSummary,
    build,
    check_options,
    list_models,
)

__all__ = [
    "ZOO",
    "Builder",
    "ZooEntry",
    "ZooError",
    "ZooOptionInfo",
    "ZooSummary",
    "build",
    "check_options",
    "list_models",
]
