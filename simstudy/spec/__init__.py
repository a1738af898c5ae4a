"""The vocabulary of simstudy: frozen pydantic specs, loadable from YAML.

Layer 1 of the design: pure values, no I/O beyond loading YAML.
"""

from simstudy.spec.base import Spec
from simstudy.spec.cluster import Cluster, Job, NetworkSharing, Placement, host_tors, npu_hosts, placements
from simstudy.spec.load import (
    SpecError,
    load_document,
    load_runnable,
    load_scenario,
    load_spec,
    load_study,
    resolve_references,
    spec_error,
    validate_as,
)
from simstudy.spec.model import Layer, Model, ModelSpec, ZooModel
from simstudy.spec.parallelism import AllReduce, Gossip, InNetwork, Parallelism, ParameterServer
from simstudy.spec.scenario import Scenario, canonical_json
from simstudy.spec.study import BackendOptions, BackendSpec, Baseline, Congestion, PlotSpec, Study
from simstudy.spec.system import Jitter, LayerTime, MeasuredCompute, Straggler, System, Variability
from simstudy.spec.topology import (
    BinaryTreeStar,
    Clique,
    Clos3,
    ClosCsv,
    ClosHost,
    Dim,
    FatTree,
    FullyConnected,
    LeafSpine,
    MultiDim,
    Ring,
    Star,
    Switch,
    Topology,
    Tree,
    is_graph,
    topology_dims,
)
from simstudy.spec.training import Training

__all__ = [
    "AllReduce",
    "BackendOptions",
    "BackendSpec",
    "Baseline",
    "BinaryTreeStar",
    "Clique",
    "Clos3",
    "ClosCsv",
    "ClosHost",
    "Cluster",
    "Congestion",
    "Dim",
    "FatTree",
    "FullyConnected",
    "Gossip",
    "InNetwork",
    "Jitter",
    "Job",
    "Layer",
    "LayerTime",
    "LeafSpine",
    "MeasuredCompute",
    "Model",
    "ModelSpec",
    "MultiDim",
    "NetworkSharing",
    "Parallelism",
    "ParameterServer",
    "Placement",
    "PlotSpec",
    "Ring",
    "Scenario",
    "Spec",
    "SpecError",
    "Star",
    "Straggler",
    "Study",
    "Switch",
    "System",
    "Topology",
    "Training",
    "Tree",
    "Variability",
    "ZooModel",
    "canonical_json",
    "host_tors",
    "is_graph",
    "load_document",
    "load_runnable",
    "load_scenario",
    "load_spec",
    "load_study",
    "npu_hosts",
    "placements",
    "resolve_references",
    "spec_error",
    "topology_dims",
    "validate_as",
]
