"""Read pcap and pcapng captures into per-packet tables, and turn those into TrafficTables.

`read_pcap(path)` returns one row per IPv4/IPv6 packet (non-IP frames are counted and dropped):

| column | dtype | meaning |
|---|---|---|
| `time` | float64 | capture time, seconds since the epoch |
| `src_ip`, `dst_ip` | category | addresses as text (`10.0.0.1`, `fe80::1`); categories sorted numerically, IPv4 first |
| `sport`, `dport` | int32 | TCP/UDP ports (0 for other protocols and non-first fragments) |
| `proto` | uint8 | IP protocol after IPv6 extension headers (6 TCP, 17 UDP, ...) |
| `ip_bytes` | int64 | IP total length (IPv6: payload length + 40), whatever the snap length |
| `payload_bytes` | int64 | `ip_bytes` minus the IP and TCP/UDP headers (never negative) |
| `tcp_seq` | uint32 | TCP sequence number (0 for other protocols and when the snap length cut it) |
| `tcp_flags` | uint8 | TCP flags (FIN 1, SYN 2, RST 4, PSH 8, ACK 16, ...; 0 as for `tcp_seq`) |
| `cap_bytes` | int32 | bytes captured for the frame (link header included) |

How it stays fast: the file is memory-mapped and read in chunks of `chunk_bytes` (default 64 MiB).
Within a chunk the record boundaries are found first (the only sequential part), then every field
is read for all packets at once with numpy, 16384 packets at a time so that their bytes stay in
cache. Boundaries are found, in order of preference:

1. constant stride: a snap-length-truncated or fixed-size capture has the same record length
   everywhere. The first 64 records prove the stride, no offset array is built, and the length of
   every further record is checked as it is decoded (a record that breaks the stride ends the chunk
   there and the walk resumes from it);
2. lanes: the chunk is cut into thousands of segments and one walker per segment steps through
   record headers, all walkers advancing together in numpy. A walker that starts inside a record
   slides byte by byte until the header looks plausible. Walkers are then stitched: a segment's
   records are accepted only from the exact position where the true chain from the previous
   segment enters it, so the result is always the sequential walk's result. The first bytes of
   scattered records are then copied together (one memcpy each) so that fields are strided reads;
3. a plain sequential walk (struct.unpack_from) for the parts the lanes could not prove, and for
   captures of large records, where it is already fast per byte.

Memory: the output columns are allocated once from an estimate of the packet count (exact for a
constant-stride capture) and chunks decode straight into them; mapped file pages are released
after each chunk. The peak is about the output table plus one chunk's scratch arrays.

`read_pcap_dir(directory)` reads the one-directory-per-experiment layout of public captures
(`framework-model-optimizer-batchsize-backend-delay[-topology]`, one pcap per worker, optional
`meta.json`), and `to_traffic_table(packets, ...)` maps endpoints to ranks and builds a checked
TrafficTable (see `simstudy.table`).

The package, module by module: `base` (`PcapError`, `Interface`, `PcapResult`), `links` (one entry
per link type read: where the IP header starts),
`buffer` (the mapped file and where each packet's bytes are), `walk` (record boundaries),
`decode` (link, IP and transport headers of a block of packets), `collect` (columns across
chunks), `classic` and `pcapng` (the two file formats), `reader` (`read_pcap`), `directory`
(capture directories) and `table` (packet table -> TrafficTable).
"""

from simstudy.traffic.meta import parse_experiment_name
from simstudy.traffic.pcap.base import (
    DEFAULT_CHUNK_BYTES,
    MAX_CAPLEN,
    Interface,
    PcapError,
    PcapResult,
    PcapWarning,
)
from simstudy.traffic.pcap.directory import (
    CAPTURE_SUFFIXES,
    CaptureDir,
    read_pcap_dir,
)
from simstudy.traffic.pcap.links import (
    LINK_TYPES,
    LINKTYPE_ETHERNET,
    LINKTYPE_IPV4,
    LINKTYPE_IPV6,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_LOOP,
    LINKTYPE_NULL,
    LINKTYPE_RAW,
    LinkType,
)
from simstudy.traffic.pcap.reader import read_pcap
from simstudy.traffic.pcap.table import sequence_advance, to_traffic_table

__all__ = [
    "CAPTURE_SUFFIXES",
    "DEFAULT_CHUNK_BYTES",
    "LINKTYPE_ETHERNET",
    "LINKTYPE_IPV4",
    "LINKTYPE_IPV6",
    "LINKTYPE_LINUX_SLL",
    "LINKTYPE_LINUX_SLL2",
    "LINKTYPE_LOOP",
    "LINKTYPE_NULL",
    "LINKTYPE_RAW",
    "LINK_TYPES",
    "MAX_CAPLEN",
    "CaptureDir",
    "Interface",
    "LinkType",
    "PcapError",
    "PcapResult",
    "PcapWarning",
    "parse_experiment_name",
    "read_pcap",
    "read_pcap_dir",
    "sequence_advance",
    "to_traffic_table",
]
