"""Every network backend, one entry each: to add a backend, write its module and add its entry here
(docs/development.md, "Adding a network backend").

An entry says what the backend is called, how it is built from a `BackendSpec`, which congestion
modes it models, what it can keep of the transfers, what of its options goes into a run key and
whether it can run on this machine. `make_backend`, the run keys, the CLI's `--backend` choices and
the specs' `backend:` values all come from here: the spec layer, which cannot import this one, keeps
the names alone (`simstudy.spec.study.BackendName`) and this module checks that they agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

from simstudy.backends import ns3
from simstudy.backends.astrasim import AstraSimBackend
from simstudy.backends.base import Backend, Progress
from simstudy.backends.flowsim import CORE_MISSING, FlowsimBackend
from simstudy.backends.flowsim.sharing import refusal
from simstudy.spec import BackendSpec, Cluster, Congestion, Scenario, SpecError
from simstudy.spec.study import BackendName

#: `make(spec, mode, astra_sim, progress)`: the backend of a spec, run in congestion `mode`;
#: `astra_sim` is the ASTRA-SIM binary given on this machine, `progress` a run's progress callback.
Factory = Callable[[BackendSpec, Congestion, str | Path | None, Callable[[Progress], None] | None], Backend]

#: What every backend can keep of its transfers (`traffic:`).
TRAFFIC = ("rows", "links", "none")


def _anywhere() -> str | None:
    return None


@dataclass(frozen=True)
class BackendEntry:
    """One backend: its name (a `BackendName`) and a few words on it (`about`, named in errors)."""

    name: str
    about: str
    make: Factory
    #: the congestion modes it models; a spec asking for another one runs the first (astrasim's
    #: unaware binary under the default `fluid`, ns-3's packets whatever the spec says)
    congestion: tuple[Congestion, ...]
    #: its part of a run key from the mode it runs: every option that changes its results
    key: Callable[[Congestion], str]
    #: what it can keep of the transfers
    traffic: tuple[str, ...] = TRAFFIC
    #: None when it can run on this machine, else why not (one line, with the fix); what depends on
    #: a run's arguments (astrasim's binary, `--astra-sim`) is found out when the run starts
    available: Callable[[], str | None] = _anywhere
    #: it runs ranks that share their hosts' cores (`system.host_cores`)
    shared_hosts: bool = True
    #: it reads every rank's Chakra ET file (else it runs from the compiled graphs in memory)
    et_files: bool = False

    def mode(self, spec: BackendSpec) -> Congestion:
        """The congestion mode it runs for `spec`."""
        return spec.congestion if spec.congestion in self.congestion else self.congestion[0]


def _flowsim(spec: BackendSpec, mode: Congestion, astra_sim: str | Path | None,
             progress: Callable[[Progress], None] | None) -> Backend:
    return FlowsimBackend(congestion=mode, traffic=spec.traffic, traffic_bin_s=spec.traffic_bin_s, progress=progress,
                          engine=spec.engine)


def _astrasim(spec: BackendSpec, mode: Congestion, astra_sim: str | Path | None,
              progress: Callable[[Progress], None] | None) -> Backend:
    return AstraSimBackend(astra_sim, aware=mode is Congestion.AWARE, traffic=spec.traffic,
                           traffic_bin_s=spec.traffic_bin_s)


def _ns3(spec: BackendSpec, mode: Congestion, astra_sim: str | Path | None,
         progress: Callable[[Progress], None] | None) -> Backend:
    return ns3.Ns3Backend(traffic=spec.traffic, traffic_bin_s=spec.traffic_bin_s, progress=progress)


REGISTRY: dict[str, BackendEntry] = {e.name: e for e in (
    BackendEntry("flowsim", "built in", _flowsim, (Congestion.FLUID, Congestion.UNAWARE, Congestion.AWARE),
                 key=lambda mode: f"flowsim:congestion={mode.value}"),
    BackendEntry("astrasim", "the ASTRA-SIM binary", _astrasim, (Congestion.UNAWARE, Congestion.AWARE),
                 key=lambda mode: f"astrasim:aware={mode is Congestion.AWARE}", shared_hosts=False, et_files=True),
    BackendEntry("ns3", "the packet network", _ns3, (Congestion.NS3,), key=lambda mode: "ns3",
                 traffic=(*TRAFFIC, "pcap"), available=lambda: None if ns3.available() else ns3.MISSING),
)}

#: The backends' names, in the order the CLI and the errors list them.
NAMES = tuple(REGISTRY)

if get_args(BackendName) != NAMES:  # pragma: no cover - caught by any import while adding a backend
    raise ImportError(f"simstudy.spec.study.BackendName lists {get_args(BackendName)}, the registry {NAMES}: "
                      "give the new backend's name in both")


def entry(spec: BackendSpec) -> BackendEntry:
    """The entry of `spec`'s backend, once the options it was given are ones it takes: a SpecError
    naming the option (`traffic`) otherwise."""
    found = REGISTRY[spec.name]
    if spec.traffic not in found.traffic:
        takers = " or ".join(f"{e.name} ({e.about})" for e in REGISTRY.values() if spec.traffic in e.traffic)
        raise SpecError(None, "traffic", f"{spec.traffic} needs backend {takers}, not {spec.name}")
    if spec.engine == "compiled" and CORE_MISSING is not None:
        raise SpecError(None, "engine", f"{CORE_MISSING}; use engine python or auto")
    return found


def backend_key(spec: BackendSpec) -> str:
    """The part of a run key that names the simulator and its result-changing options (what a run
    keeps of its transfers changes its files, so it is part of the key unless `rows`)."""
    found = entry(spec)
    base = found.key(found.mode(spec))
    if spec.traffic == "pcap":
        return f"{base}:traffic=pcap"
    if spec.traffic == "links":
        return f"{base}:traffic=links:{spec.traffic_bin_s!r}"
    if spec.traffic == "none":
        return f"{base}:traffic=none"
    return base


def make_backend(spec: BackendSpec, *, astra_sim: str | Path | None = None,
                 progress: Callable[[Progress], None] | None = None) -> Backend:
    """The backend a spec names; `astra_sim` is the binary for `astrasim` (a path of this machine,
    so not part of the spec or of any run key); `progress(Progress)` is fed by flowsim and ns3. A
    backend that cannot run here is a SpecError naming `backend` and the reason."""
    found = entry(spec)
    missing = found.available()
    if missing is not None:
        raise SpecError(None, "backend", missing)
    return found.make(spec, found.mode(spec), astra_sim, progress)


def check_network(scenario: Scenario | Cluster, spec: BackendSpec, source: str | Path | None = None) -> None:
    """What of a scenario's network only some backends model: a topology's `token_bucket` (flowsim's
    fluid mode and the packet network), a cluster's `network` (sharing policies, Crux's paths: a
    backend that shares links by rates, flowsim's fluid mode). Otherwise a SpecError naming
    `source` and the field."""
    mode = entry(spec).mode(spec)  # only flowsim's entry runs the fluid mode
    if getattr(scenario.topology, "token_bucket", None) is not None and not (mode.fluid or mode is Congestion.NS3):
        raise SpecError(source, "topology.token_bucket",
                        f"a token bucket is modelled by flowsim's fluid congestion mode and the packet network "
                        f"(ns3), not by {spec.name}'s {mode.value} mode (use one of them, or leave token_bucket out)")
    if not isinstance(scenario, Cluster):
        return
    field = scenario.network.given()
    if field is None:
        return
    if not mode.fluid:
        raise SpecError(source, field, refusal(mode, spec.name))
