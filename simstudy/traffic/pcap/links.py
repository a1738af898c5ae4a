"""Link types: one entry per link type the reader reads, saying where each packet's IP header
starts and which IP version it carries, for a block of packets at once (`LinkType.locate`, the
reader's path) and for one packet (`LinkType.locate_one`, the reference decoder's path,
`simstudy.traffic.pcap.reference`). A new link type is one entry of `LINK_TYPES`.

A packet whose captured bytes end before the IP header it would have (the link header, or a
VLAN tag, cut by the snap length) is malformed; a link header that names another protocol (ARP,
LLDP, an address family other than IPv4 and IPv6) is not IP. Both are counted and dropped.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from simstudy.traffic.pcap.base import PcapError, Rel
from simstudy.traffic.pcap.buffer import Buf, Where

Net = NDArray[np.uint8] | int
#: (buf, where each packet's link header starts) -> (offset of its IP header, IP version 4/6 or 0 for
#: not IP, captured bytes the link layer needs: a packet with fewer is malformed).
Locate = Callable[[Buf, Where], tuple[Rel, Net, Rel]]
#: One frame's captured bytes -> (offset of its IP header, IP version 4/6 or 0 for not IP), or None
#: when the bytes end before the link layer says what it carries.
LocateOne = Callable[[bytes], tuple[int, int] | None]


@dataclass(frozen=True)
class LinkType:
    """One link type: its number in pcap/pcapng headers, libpcap's name, and its decoders."""

    number: int
    name: str
    what: str
    locate: Locate
    locate_one: LocateOne


def _lut(size: int, items: Mapping[int, int], dtype: type[np.generic] = np.uint8) -> NDArray[Any]:
    table = np.zeros(size, dtype=dtype)
    for k, v in items.items():
        table[k] = v
    return table


ETHERTYPE_VERSION: Final = {0x0800: 4, 0x86DD: 6}
VLAN_TPIDS: Final = (0x8100, 0x88A8, 0x9100)  # 802.1Q, 802.1ad, and the older QinQ TPID
_ETHERTYPE_NET: Final = _lut(65536, ETHERTYPE_VERSION)
_VLAN: Final = _lut(65536, dict.fromkeys(VLAN_TPIDS, 1), np.bool_)
_VERSION_NET: Final = _lut(16, {4: 4, 6: 6})
#: Address families of IPv6 in BSD loopback headers: Linux 10, NetBSD/OpenBSD 24, FreeBSD 28, macOS 30.
AF_INET: Final = 2
AF_INET6: Final = (10, 24, 28, 30)


def _u16(frame: bytes, at: int) -> int | None:
    return int(struct.unpack_from(">H", frame, at)[0]) if len(frame) >= at + 2 else None


def _whole(l3: int, version: int, frame: bytes) -> tuple[int, int] | None:
    return (l3, version) if len(frame) >= l3 else None


# --- Ethernet, with up to two VLAN tags (802.1Q, QinQ) ------------------------------------------


def _ethernet(buf: Buf, data: Where) -> tuple[Rel, Net, Rel]:
    et = data.read(buf, 12, ">u2")
    if bool((et == 0x0800).all()):
        return 14, 4, 14
    l3: Rel = 14
    tagged = _VLAN[et]
    if tagged.any():  # 802.1Q / 802.1ad, up to two tags (QinQ)
        l3 = np.where(tagged, 18, 14)
        et = np.where(tagged, data.read(buf, 16, ">u2"), et)
        inner = tagged & _VLAN[et]
        if inner.any():
            l3 = np.where(inner, 22, l3)
            et = np.where(inner, data.read(buf, 20, ">u2"), et)
    return l3, _ETHERTYPE_NET[et], l3


def _ethernet_one(frame: bytes) -> tuple[int, int] | None:
    at = 12
    while True:
        et = _u16(frame, at)
        if et is None:
            return None
        if et not in VLAN_TPIDS or at == 20:  # at most two tags; a third is not IP
            return _whole(at + 2, ETHERTYPE_VERSION.get(et, 0), frame)
        at += 4


# --- Linux cooked captures (tcpdump -i any) -------------------------------------------------------


def _sll(buf: Buf, data: Where) -> tuple[Rel, Net, Rel]:
    return 16, _ETHERTYPE_NET[data.read(buf, 14, ">u2")], 16


def _sll_one(frame: bytes) -> tuple[int, int] | None:
    et = _u16(frame, 14)
    return None if et is None else _whole(16, ETHERTYPE_VERSION.get(et, 0), frame)


def _sll2(buf: Buf, data: Where) -> tuple[Rel, Net, Rel]:
    return 20, _ETHERTYPE_NET[data.read(buf, 0, ">u2")], 20


def _sll2_one(frame: bytes) -> tuple[int, int] | None:
    et = _u16(frame, 0)
    return None if et is None else _whole(20, ETHERTYPE_VERSION.get(et, 0), frame)


# --- raw IP -----------------------------------------------------------------------------------------


def _raw(buf: Buf, data: Where) -> tuple[Rel, Net, Rel]:
    return 0, _VERSION_NET[data.read(buf, 0, "u1") >> 4], 1  # the version nibble must be captured


def _raw_one(frame: bytes) -> tuple[int, int] | None:
    return (0, {4: 4, 6: 6}.get(frame[0] >> 4, 0)) if frame else None


def _fixed(version: int) -> tuple[Locate, LocateOne]:
    def locate(buf: Buf, data: Where) -> tuple[Rel, Net, Rel]:
        return 0, version, 0

    def locate_one(frame: bytes) -> tuple[int, int] | None:
        return 0, version

    return locate, locate_one


# --- BSD loopback ------------------------------------------------------------------------------------


def _family(af: NDArray[Any]) -> NDArray[np.uint8]:
    return np.where(af == AF_INET, 4, np.where(np.isin(af, AF_INET6), 6, 0)).astype(np.uint8)


def _family_one(af: int) -> int:
    return 4 if af == AF_INET else 6 if af in AF_INET6 else 0


def _null(buf: Buf, data: Where) -> tuple[Rel, Net, Rel]:
    af = data.read(buf, 0, "<u4")
    if bool((af == AF_INET).all()):
        return 4, 4, 4
    af = np.where(af > 0xFFFF, af.byteswap(), af)  # host byte order of the capturing machine: either
    return 4, _family(af), 4


def _null_one(frame: bytes) -> tuple[int, int] | None:
    if len(frame) < 4:
        return None
    af = struct.unpack_from("<I", frame)[0]
    return 4, _family_one(af if af <= 0xFFFF else struct.unpack_from(">I", frame)[0])


def _loop(buf: Buf, data: Where) -> tuple[Rel, Net, Rel]:
    af = data.read(buf, 0, ">u4")
    return 4, 4 if bool((af == AF_INET).all()) else _family(af), 4


def _loop_one(frame: bytes) -> tuple[int, int] | None:
    return (4, _family_one(struct.unpack_from(">I", frame)[0])) if len(frame) >= 4 else None


LINKTYPE_NULL: Final = 0
LINKTYPE_ETHERNET: Final = 1
LINKTYPE_RAW: Final = 101
LINKTYPE_LOOP: Final = 108
LINKTYPE_LINUX_SLL: Final = 113
LINKTYPE_IPV4: Final = 228
LINKTYPE_IPV6: Final = 229
LINKTYPE_LINUX_SLL2: Final = 276

_IPV4 = _fixed(4)
_IPV6 = _fixed(6)

#: The link types read, by number. 12 and 14 are DLT_RAW values some systems wrote into files.
LINK_TYPES: Final[dict[int, LinkType]] = {t.number: t for t in (
    LinkType(LINKTYPE_NULL, "NULL", "BSD loopback: a 4-byte address family in the capturing host's byte order",
             _null, _null_one),
    LinkType(LINKTYPE_ETHERNET, "ETHERNET", "Ethernet II, with up to two 802.1Q/802.1ad VLAN tags",
             _ethernet, _ethernet_one),
    LinkType(12, "RAW", "raw IPv4 or IPv6 (DLT 12)", _raw, _raw_one),
    LinkType(14, "RAW", "raw IPv4 or IPv6 (DLT 14)", _raw, _raw_one),
    LinkType(LINKTYPE_RAW, "RAW", "raw IPv4 or IPv6", _raw, _raw_one),
    LinkType(LINKTYPE_LOOP, "LOOP", "OpenBSD loopback: a 4-byte address family in network byte order",
             _loop, _loop_one),
    LinkType(LINKTYPE_LINUX_SLL, "LINUX_SLL", "Linux cooked capture v1 (tcpdump -i any, older libpcap)",
             _sll, _sll_one),
    LinkType(LINKTYPE_IPV4, "IPV4", "raw IPv4", *_IPV4),
    LinkType(LINKTYPE_IPV6, "IPV6", "raw IPv6", *_IPV6),
    LinkType(LINKTYPE_LINUX_SLL2, "LINUX_SLL2", "Linux cooked capture v2 (tcpdump -i any)", _sll2, _sll2_one),
)}

#: libpcap's names of link types simstudy does not read, to name them in the error.
OTHER_LINK_NAMES: Final[dict[int, str]] = {
    6: "IEEE802_5", 9: "PPP", 10: "FDDI", 50: "PPP_HDLC", 51: "PPP_ETHER", 104: "C_HDLC", 105: "IEEE802_11",
    119: "IEEE802_11_PRISM", 127: "IEEE802_11_RADIOTAP", 163: "IEEE802_11_AVS", 189: "USB_LINUX", 192: "PPI",
    195: "IEEE802_15_4_WITHFCS", 201: "BLUETOOTH_HCI_H4_WITH_PHDR", 220: "USB_LINUX_MMAPPED",
    227: "CAN_SOCKETCAN", 239: "NFLOG", 253: "NETLINK",
    **{147 + k: f"USER{k}" for k in range(16)},
}


def supported_links() -> str:
    return ", ".join(f"{k} {t.name}" for k, t in LINK_TYPES.items())


def link_name(number: int) -> str:
    """libpcap's name of a link type, or "an unknown link type"."""
    t = LINK_TYPES.get(number)
    return t.name if t else OTHER_LINK_NAMES.get(number, "not a link type libpcap names")


def require_link(number: int, where: str) -> None:
    """PcapError (one line, naming the link type) unless the reader reads `number`."""
    if number not in LINK_TYPES:
        raise PcapError(f"{where}: unsupported link type {number} ({link_name(number)}); simstudy reads "
                        f"{supported_links()}")
