"""Traffic sources: captures with meta.json (ranks, control connection, iteration marks) and runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simstudy.addresses import rank_address
from simstudy.traffic import make_table, write_table
from simstudy.traffic.pcap import read_pcap
from simstudy.traffic.pcap_write import write_pcap
from simstudy.traffic.sources import SourceError, load_traffic

EPOCH = 1.7e9


def _table(rows: list[tuple[float, float, int, int, int]]) -> object:
    a = np.array(rows, dtype=np.float64)
    return make_table({"t_start_s": a[:, 0], "t_end_s": a[:, 1], "src": a[:, 2], "dst": a[:, 3],
                       "bytes": a[:, 4], "flow": np.arange(len(a)), "op": ["p2p"] * len(a)})


def test_written_packets_carry_exactly_the_transfer_bytes(tmp_path: Path) -> None:
    table = _table([(0.0, 0.001, 0, 1, 10_000), (0.0005, 0.0005, 1, 0, 41), (0.002, 0.004, 2, 0, 3_000_000)])
    n = write_pcap(table, tmp_path / "t.pcap", epoch_s=EPOCH)  # type: ignore[arg-type]
    assert n == 7 + 1 + 2000
    r = read_pcap(tmp_path / "t.pcap")
    p = r.packets
    assert len(p) == n and int(p["ip_bytes"].sum()) == 10_000 + 41 + 3_000_000
    assert (p["ip_bytes"] <= 1500).all() and (p["payload_bytes"] == p["ip_bytes"] - 40).all()
    assert set(p["src_ip"].astype(str)) == {rank_address(0), rank_address(1), rank_address(2)}
    t = p["time"].to_numpy() - EPOCH
    # float64 epoch seconds resolve ~0.24 us at 1.7e9 s
    assert t.min() == pytest.approx(0.001 / 7, abs=1e-6) and t.max() == pytest.approx(0.004, abs=1e-6)


def test_capture_ranks_control_and_iteration_alignment(tmp_path: Path) -> None:
    # rank 0 <-> rank 1 training traffic from t=1 s; a control exchange with rank 2's address at t=0.5 s
    table = _table([(0.5, 0.5, 2, 0, 500), (1.0, 1.01, 0, 1, 6000), (1.5, 1.51, 1, 0, 6000),
                    (2.0, 2.01, 0, 1, 6000)])
    cap = tmp_path / "cap"
    cap.mkdir()
    write_pcap(table, cap / "w.pcap", epoch_s=EPOCH)  # type: ignore[arg-type]
    meta = {"ranks": {"0": rank_address(1), "1": {"ip": rank_address(0)}},  # swapped on purpose
            "control": [f"{rank_address(2)}:40000"],
            "iterations": {"0": [[EPOCH + 0.9, EPOCH + 1.4], [EPOCH + 1.4, EPOCH + 2.1]],
                           "1": [[EPOCH + 0.95, EPOCH + 1.45]]}}
    (cap / "meta.json").write_text(json.dumps(meta))
    src = load_traffic(cap)
    t = src.table
    assert src.kind == "capture" and src.boundaries == {0: [0.0, pytest.approx(0.5)], 1: [pytest.approx(0.05)]}
    assert t["t_start_s"].min() >= 0 and len(t) == 12  # the control packet at 0.5 s is before iteration 1
    sent = t.groupby("src")["bytes"].sum().to_dict()
    assert sent == {1: 12_000, 0: 6_000}  # ranks follow meta.json, not IP order
    assert t.groupby("iteration")["bytes"].sum().to_dict() == {0: 6_000, 1: 12_000}  # split at 1.4 s


def test_packets_after_the_last_iteration_are_dropped(tmp_path: Path) -> None:
    table = _table([(1.0, 1.01, 0, 1, 6000), (1.5, 1.51, 1, 0, 6000), (3.0, 3.0, 0, 1, 6000)])
    cap = tmp_path / "cap"
    cap.mkdir()
    write_pcap(table, cap / "w.pcap", epoch_s=EPOCH)  # type: ignore[arg-type]
    meta = {"iterations": {"0": [[EPOCH + 0.9, EPOCH + 2.0]], "1": [[EPOCH + 0.9, EPOCH + 2.5]]}}
    (cap / "meta.json").write_text(json.dumps(meta))
    t = load_traffic(cap).table
    assert int(t["bytes"].sum()) == 12_000 and set(t["iteration"]) == {0}  # the teardown packet at 3 s is gone


def test_control_connection_is_labelled(tmp_path: Path) -> None:
    table = _table([(0.0, 0.0, 2, 0, 700), (1.0, 1.01, 0, 1, 6000), (1.5, 1.5, 2, 0, 500)])
    cap = tmp_path / "cap"
    cap.mkdir()
    write_pcap(table, cap / "w.pcap", epoch_s=EPOCH)  # type: ignore[arg-type]
    (cap / "meta.json").write_text(json.dumps({"control": [f"{rank_address(2)}:40000"]}))
    t = load_traffic(cap).table
    assert set(t[t["op"] == "control"]["bytes"]) == {500}
    assert 700 not in set(t["bytes"])  # before the first training packet (the time origin): dropped
    assert t["t_start_s"].min() == 0


def test_run_directories_and_errors(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    write_table(_table([(0.0, 0.001, 0, 1, 100)]), run / "traffic.parquet")  # type: ignore[arg-type]
    assert load_traffic(run).kind == "run" and len(load_traffic(run / "traffic.parquet").table) == 1
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.pcap").write_bytes(b"\x00" * 64)
    with pytest.raises(ValueError, match=r"x\.pcap"):
        load_traffic(bad)
    (tmp_path / "m").mkdir()
    write_pcap(_table([(0.0, 0.001, 0, 1, 100)]), tmp_path / "m" / "a.pcap")  # type: ignore[arg-type]
    (tmp_path / "m" / "meta.json").write_text("{not json")
    with pytest.raises(SourceError, match=r"meta\.json: not valid JSON"):
        load_traffic(tmp_path / "m")


def test_retransmitted_payload_counts_once(tmp_path: Path) -> None:
    """A segment sent twice (as TCP does after a loss) adds wire bytes but no payload; sequence
    numbers run on across transfers of one pair, so only the real resend counts."""
    from simstudy.traffic.pcap import sequence_advance
    from simstudy.traffic.pcap_write import _RECORD

    table = _table([(0.0, 0.001, 0, 1, 14_600), (0.002, 0.003, 0, 1, 14_600), (0.004, 0.005, 1, 0, 7_300)])
    cap = tmp_path / "cap"
    cap.mkdir()
    path = cap / "w.pcap"
    n = write_pcap(table, path, epoch_s=EPOCH)  # type: ignore[arg-type]
    p = read_pcap(path).packets
    assert (sequence_advance(p) == p["payload_bytes"]).all()  # 3 transfers, 2 connections
    header = path.read_bytes()[:24]
    rec = np.fromfile(path, dtype=_RECORD, offset=24)
    assert len(rec) == n == 10 + 10 + 5
    resend = rec[12:13].copy()  # the 3rd packet of the 2nd transfer, again 0.5 ms later
    resend["ts_usec"] += 500_000  # nanosecond timestamps
    stamps = rec["ts_sec"].astype(np.int64) * 10**9 + rec["ts_usec"]
    at = int(np.searchsorted(stamps, int(resend["ts_sec"][0]) * 10**9 + int(resend["ts_usec"][0])))
    out = np.empty(n + 1, dtype=_RECORD)
    out[:at], out[at], out[at + 1:] = rec[:at], resend[0], rec[at:]
    with path.open("wb") as f:
        f.write(header)
        out.tofile(f)
    p = read_pcap(path).packets
    again = p["payload_bytes"].to_numpy() - sequence_advance(p)
    assert again.tolist() == [0] * at + [1460] + [0] * (n - at)
    src = load_traffic(cap)
    assert int(src.table["bytes"].sum()) == 14_600 * 2 + 7_300 + 1500  # the wire carried it twice
    assert int(src.table["payload_bytes"].sum()) == (14_600 * 2 + 7_300) - 25 * 40  # the application once
    assert any("1,460 TCP payload bytes in 1 packets were retransmissions" in w for w in src.warnings)


def _rewritten(path: Path, edit: object) -> None:
    """The pcap at `path` with its records passed through `edit` (records -> records)."""
    from simstudy.traffic.pcap_write import _RECORD

    header = path.read_bytes()[:24]
    rec = edit(np.fromfile(path, dtype=_RECORD, offset=24))  # type: ignore[operator]
    with path.open("wb") as f:
        f.write(header)
        rec.tofile(f)


@pytest.mark.parametrize("how", ["not captured", "out of order", "port reused"])
def test_payload_counts_what_the_capture_missed_once(tmp_path: Path, how: str) -> None:
    """Bytes the application sent are the advance of each connection's sequence numbers: a segment
    the capture does not hold is counted at the packet after it, one captured late (out of order)
    once, at the gap; a port reused by a new connection (a SYN, a new initial sequence number a
    quarter of the sequence space away) starts counting again, not across the jump."""
    from simstudy.traffic.pcap import sequence_advance

    table = _table([(0.0, 0.001, 0, 1, 14_600), (0.002, 0.003, 0, 1, 14_600), (0.004, 0.005, 1, 0, 7_300)])
    cap = tmp_path / "cap"
    cap.mkdir()
    path = cap / "w.pcap"
    n = write_pcap(table, path, epoch_s=EPOCH)  # type: ignore[arg-type]
    payload = 14_600 * 2 + 7_300 - 40 * n  # 40 bytes of IP and TCP header in each packet
    second = 10  # the first packet of the second transfer of 0 -> 1 (the records are in time order)

    def edit(rec: np.ndarray) -> np.ndarray:
        if how == "not captured":
            return np.delete(rec, second + 2)
        if how == "out of order":
            return rec[np.r_[0:second + 2, second + 3, second + 2, second + 4:len(rec)]]
        syn = rec[second:second + 1].copy()
        isn = (int(rec["seq"][second]) + 2**30) % 2**32
        syn["flags"], syn["seq"] = 0x02, isn
        syn["orig_len"], syn["ip_len"] = syn["incl_len"], 40  # headers only: no payload
        later = rec[second:].copy()
        same = later["ip_src"] == rec["ip_src"][second]
        later["seq"][same] = (later["seq"][same].astype(np.int64) + 2**30 + 1) % 2**32
        return np.concatenate([rec[:second], syn, later]).astype(rec.dtype)  # concatenate drops the byte order

    _rewritten(path, edit)
    p = read_pcap(path).packets
    sent = sequence_advance(p)
    assert int(sent.sum()) == payload
    src = load_traffic(cap)
    assert int(src.table["payload_bytes"].sum()) == payload
    gaps = [w for w in src.warnings if "gaps of sequence numbers" in w]
    if how == "port reused":
        assert not gaps and (sent == p["payload_bytes"]).all()
    else:
        assert gaps and "1,460 TCP payload bytes in 1 gaps" in gaps[0]
