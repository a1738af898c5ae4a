"""Resolve a scenario: replace a zoo reference by the model's explicit layers."""

from __future__ import annotations

from pathlib import Path

from simstudy import zoo
from simstudy.spec import Scenario, SpecError, ZooModel


def resolve(scenario: Scenario, *, source: str | Path | None = None) -> Scenario:
    """The same scenario with an explicit model; errors name `source` and the field."""
    ref = scenario.model
    if not isinstance(ref, ZooModel):
        return scenario
    try:
        model = zoo.build(ref.zoo, **ref.options)
    except zoo.ZooError as exc:
        raise SpecError(source, "model", str(exc)) from None
    return scenario.model_copy(update={"model": model})
