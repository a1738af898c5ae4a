"""The packet network's C++ part: fabric.h and fabric.cpp, compiled by the wheel's cppyy through the
loader `--backend ns3` uses, shipped as package data, and given every host's address by Python.

Tests that need ns-3's wheel take the `ns3` fixture (skipped with the reason without it, failed
under CI, which installs it).
"""

from __future__ import annotations

import fnmatch
import ipaddress
import tomllib
from pathlib import Path

import pytest

from simstudy.backends.base import BackendError
from simstudy.backends.network import Network
from simstudy.backends.ns3 import fabric
from simstudy.compiler.topology_file import topology_of
from simstudy.spec import Star

pytestmark = pytest.mark.ns3

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(fabric.__file__).parent


def test_the_cpp_files_are_package_data() -> None:
    """Every C++ file beside the package's modules is in a wheel (pyproject's package-data), and the
    loader compiles one of them, which includes the others (RoCE's among them)."""
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "simstudy.backends.ns3"]
    cpp = sorted(p.name for p in PACKAGE.iterdir() if p.suffix in (".h", ".cpp"))
    assert cpp == ["fabric.cpp", "fabric.h", "roce.cpp", "roce.h"]
    assert all(any(fnmatch.fnmatch(name, g) for g in globs) for name in cpp), (cpp, globs)
    assert fabric.CPP_SOURCE.parent == PACKAGE and fabric.CPP_SOURCE.name in cpp
    source = fabric.CPP_SOURCE.read_text()
    assert '#include "fabric.h"' in source and '#include "roce.cpp"' in source
    assert '#include "roce.h"' in (PACKAGE / "fabric.h").read_text()


def test_the_cpp_part_compiles(ns3: None) -> None:
    """The loader compiles fabric.cpp (and the header it includes) into ns-3: its classes are there."""
    ns = fabric.load()
    assert fabric.load() is ns  # once per process
    gbl = ns.cppyy.gbl.simstudy_ns3
    for name in ("Fabric", "HostPairRouting", "Stream", "Recovery", "Sniffer", "TcpPeek"):
        assert hasattr(gbl, name), name


def test_hosts_have_the_addresses_python_gives(ns3: None) -> None:
    """Each rank's interface toward the switch has `host_address(rank)` (the switch's ends have
    others), and a message between two ranks is routed by those addresses."""
    hosts = 3
    fab = fabric.Fabric(Network.from_topology(topology_of(Star(npus=hosts, bandwidth_gbps=10, latency_ns=1000))))
    try:
        cpp = fab.cpp
        got = [str(ipaddress.IPv4Address(int(cpp.host_addr[h].Get()))) for h in range(hosts)]
        assert got == [fabric.host_address(h) for h in range(hosts)]
        assert [cpp.HostOf(cpp.host_addr[h]) for h in range(hosts)] == list(range(hosts))
        switch_ends = {str(ipaddress.IPv4Address(int(cpp.link_rx_addr[k].Get())))
                       for k in range(len(cpp.link_rx_addr))} - set(got)
        assert len(switch_ends) == hosts  # one switch port per host link, none at a host's address
        stream = fab.stream(0, 2)
        fab.send(stream, 10_000, 7, fab.now_ns)
        (done,) = fab.run_until(-1)
        assert done[0] == 7 and done[1] > fab.t0_ns
    finally:
        fab.close()


def test_a_compile_error_names_file_line_and_error(ns3: None, tmp_path: Path) -> None:
    """C++ that does not compile is a BackendError with the compiler's own words."""
    ns = fabric.load()
    broken = tmp_path / "broken.cpp"
    broken.write_text("namespace simstudy_broken {\nint f() { return not_declared_anywhere; }\n}\n")
    with pytest.raises(BackendError, match=r"(?s)did not compile.*broken\.cpp:2:.*not_declared_anywhere"):
        fabric.compile_cpp(ns, broken)
