"""Every file and directory name simstudy writes or reads, in one place (layer 0: imports nothing
of simstudy).

A bundle (`simstudy compile`): `<prefix>.<rank>.et` per rank plus the ASTRA-SIM configs and the
resolved scenario. A run directory (`simstudy run`, one per sweep point): `bundle/`, `work/`,
run.json, traffic.parquet, timeline.png, and in sweeps features.json and record.json. A sweep
directory: `runs/<key>/`, summary.parquet, study.json, skipped.json, report.md, plots/. A capture
directory: one pcap per rank and meta.json. Analyses and validations write into `analysis/` and
`validation/` below the directory they read.
"""

from __future__ import annotations

# -- bundle ------------------------------------------------------------------------------------
NETWORK = "network.yml"
SYSTEM = "system.json"
REMOTE_MEMORY = "remote_memory.json"
COMM_GROUP = "comm_group.json"
SCENARIO = "scenario.json"
JOBS = "jobs.json"
#: a cluster's `network` (how its jobs share links and pick paths), when it is not max-min and ECMP
SHARING = "sharing.json"
TOPOLOGY = "topology.json"
ET_SUFFIX = ".et"

# -- run directory -----------------------------------------------------------------------------
BUNDLE_DIR = "bundle"
WORK_DIR = "work"
RUN_JSON = "run.json"
TRAFFIC = "traffic.parquet"
LINKS = "links.parquet"  # per-link binned bytes (simstudy.linktable) of a run with `traffic: links`
#: a run's link table as switch port counters (`simstudy counters`; the simulated side of a counter validation)
COUNTERS_CSV = "counters.csv"
TIMELINE_PNG = "timeline.png"
SPANS = "spans.parquet"
#: a packet-network run's pcaps (`traffic: pcap`), one per rank interface: a capture directory
PCAP_DIR = "pcap"
FEATURES = "features.json"
RECORD = "record.json"

# -- sweep directory ---------------------------------------------------------------------------
RUNS_DIR = "runs"
SUMMARY = "summary.parquet"
STUDY_JSON = "study.json"
SKIPPED_JSON = "skipped.json"
REPORT_MD = "report.md"
PLOTS_DIR = "plots"
#: `simstudy dashboard PATH` writes PATH/dashboard.html by default.
DASHBOARD_HTML = "dashboard.html"

# -- capture directory -------------------------------------------------------------------------
META = "meta.json"
LOOPBACK_PCAP = "lo.pcap"
#: `capture.also_any`: the same capture by `tcpdump -i any`, in a directory of the capture.
ANY_DIR = "any"
#: Files read as captures (one per host or interface; any name).
CAPTURE_SUFFIXES = (".pcap", ".pcapng", ".cap")

# -- analyses ----------------------------------------------------------------------------------
ANALYSIS_DIR = "analysis"
ANALYSIS_MD = "analysis.md"
VALIDATION_DIR = "validation"
VALIDATION_MD = "validation.md"
SIM_DIR = "sim"
#: The simulations of `validate --fit`'s fit, in the validation directory (`fit/run<k>`).
FIT_DIR = "fit"
#: In `analysis/plots/`.
TIMELINE_PLOT = "timeline.png"
MATRIX_PLOT = "matrix.png"
DISTRIBUTIONS_PLOT = "distributions.png"
#: In `validation/`: both analyses, and in `validation/plots/`.
FEATURES_REAL = "features_real.json"
FEATURES_SIM = "features_simulated.json"
THROUGHPUT_PLOT = "throughput.png"
PER_ITERATION_PLOT = "per_iteration.png"
MATRICES_PLOT = "matrices.png"


def rank_pcap(rank: int) -> str:
    """The capture file of one rank's interface."""
    return f"rank{rank}.pcap"
