"""The backend registry: one entry per backend, and everything that names backends or congestion
modes (the spec's values, the CLI's choices, the run keys, the contract suite) agrees with it."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import get_args

import pytest
import yaml

from simstudy.backends import AstraSimBackend, FlowsimBackend, make_backend
from simstudy.backends.flowsim.netmodels import NETMODELS
from simstudy.backends.registry import NAMES, REGISTRY, backend_key
from simstudy.cli import build_parser, main
from simstudy.spec import BackendOptions, BackendSpec, Congestion, SpecError, load_study
from simstudy.spec.study import CONGESTION_CHOICES, BackendName
from tests.backends.test_contract import _MARKS


def _choices(command: str, flag: str) -> list[str]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    action = next(a for a in sub.choices[command]._actions if flag in a.option_strings)
    return list(action.choices or [])


def test_the_spec_the_cli_and_the_contract_suite_name_the_registry_s_backends() -> None:
    assert NAMES == get_args(BackendName) == ("flowsim", "astrasim", "ns3")
    for command in ("run", "sweep", "validate"):
        assert _choices(command, "--backend") == list(NAMES)
    assert set(_MARKS) == set(REGISTRY), "add the new backend to tests/backends/test_contract.py"


def test_congestion_choices_are_the_modes_a_spec_may_give() -> None:
    assert CONGESTION_CHOICES == ("fluid", "unaware", "aware")
    for command in ("run", "sweep"):
        assert _choices(command, "--congestion") == list(CONGESTION_CHOICES)
    description = BackendOptions.model_fields["congestion"].description or ""
    for mode in Congestion:
        assert (f"{mode.value} ({mode.meaning})" in description) == mode.chosen
    # flowsim runs every mode it lists with a network model of its own
    assert set(NETMODELS) == set(REGISTRY["flowsim"].congestion)


@pytest.mark.parametrize(("options", "key"), [
    ({}, "flowsim:congestion=fluid"),
    ({"congestion": "unaware"}, "flowsim:congestion=unaware"),
    ({"name": "astrasim"}, "astrasim:aware=False"),
    ({"name": "astrasim", "congestion": "unaware"}, "astrasim:aware=False"),
    ({"name": "astrasim", "congestion": "aware"}, "astrasim:aware=True"),
    ({"name": "astrasim", "aware": True}, "astrasim:aware=True"),
    ({"name": "ns3", "congestion": "aware"}, "ns3"),
    ({"name": "ns3", "traffic": "pcap"}, "ns3:traffic=pcap"),
    ({"traffic": "links", "traffic_bin_s": 1e-4}, "flowsim:congestion=fluid:traffic=links:0.0001"),
    ({"name": "astrasim", "traffic": "none"}, "astrasim:aware=False:traffic=none"),
])
def test_run_keys_are_those_of_before(options: dict[str, object], key: str) -> None:
    """The run keys of every result already on disk depend on these strings: they do not move."""
    assert backend_key(BackendSpec.model_validate(options)) == key


def test_make_backend_runs_the_mode_the_backend_models() -> None:
    flowsim = make_backend(BackendSpec(congestion=Congestion.UNAWARE))
    assert isinstance(flowsim, FlowsimBackend) and flowsim.congestion is Congestion.UNAWARE
    default = make_backend(BackendSpec(name="astrasim"), astra_sim="somewhere/AstraSim")
    aware = make_backend(BackendSpec.model_validate({"name": "astrasim", "aware": True}))
    assert isinstance(default, AstraSimBackend) and not default.aware and default.binary_option == "somewhere/AstraSim"
    assert isinstance(aware, AstraSimBackend) and aware.aware


def test_traffic_pcap_needs_the_packet_network(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"^traffic: pcap needs backend ns3 \(the packet network\), not flowsim$"):
        make_backend(BackendSpec(name="flowsim", traffic="pcap"))
    spec = tmp_path / "s.yaml"
    spec.write_text("model: small_cnn\ntopology: {kind: ring, npus: 2}\n")
    assert main(["run", str(spec), "--traffic", "pcap", "-o", str(tmp_path / "r"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "simstudy: error: --traffic: pcap needs backend ns3 (the packet network), not flowsim"
    study = tmp_path / "study.yaml"
    study.write_text("name: s\nbase: {model: small_cnn, topology: {kind: ring, npus: 2}}\n"
                     "backend: astrasim\nbackend_options: {traffic: pcap}\n")
    assert main(["sweep", str(study), "--dry-run"]) == 2
    assert f"{study}: backend_options.traffic: pcap needs backend ns3" in capsys.readouterr().err


def test_a_backend_that_cannot_run_here_is_one_spec_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("simstudy.backends.ns3.available", lambda: False)
    assert REGISTRY["ns3"].available() is not None and REGISTRY["flowsim"].available() is None
    with pytest.raises(SpecError, match=r"^backend: the packet network needs ns-3's Python wheel"):
        make_backend(BackendSpec(name="ns3"))


def test_aware_is_the_older_name_of_congestion_aware(tmp_path: Path) -> None:
    assert BackendSpec.model_validate({"aware": True}).congestion is Congestion.AWARE
    assert BackendSpec.model_validate({"aware": False, "congestion": "unaware"}).congestion is Congestion.UNAWARE
    assert "aware" not in BackendSpec.model_validate({"aware": True}).model_dump()
    with pytest.raises(ValueError, match="aware: true means congestion: aware, but congestion is 'fluid'"):
        BackendSpec.model_validate({"aware": True, "congestion": "fluid"})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"name": "s", "base": {"model": "small_cnn"}, "backend": "astrasim",
                                    "backend_options": {"aware": True}}))
    assert load_study(path).backend_options.congestion is Congestion.AWARE


def test_packets_is_not_a_mode_to_choose() -> None:
    with pytest.raises(ValueError, match="Input should be 'fluid', 'unaware' or 'aware'"):
        BackendSpec.model_validate({"name": "ns3", "congestion": "packets"})
