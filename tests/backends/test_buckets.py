"""Token buckets in flowsim's fluid model (`flowsim.buckets`, `topology.token_bucket`): hand-computed
messages through a bucket (its burst at the line rate, then the token rate; a bucket refilled
by a pause; two flows sharing one), random messages checked against the bucket's own bound and
against the model without buckets, and the scenario: which backends take a bucket, which engine
runs it, and what validate gives a capture whose links tc tbf shaped."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simstudy.backends.flowsim.buckets import BucketFluidNet
from simstudy.backends.flowsim.netmodels import FluidNet, Msg
from simstudy.backends.flowsim.sched import Scheduler
from simstudy.spec import BackendSpec, Scenario, SpecError

#: bytes/ns: a 10 Gbit/s link behind a 200 Mbit/s bucket of 100 kB
C, R, B = 1.25, 0.025, 100_000.0
#: ns: a bucket runs out up to a ns before the model wakes; what it sent in that ns (at most C
#: bytes) moves a finish by up to C / R ns at the token rate
OWED = C / R + 2


def _arrivals(messages: list[tuple[int, tuple[int, ...], int]], buckets: dict[int, tuple[float, float]],
              links: int = 3, line: float = C) -> list[int]:
    """When each (start, links, size) message arrives (no latency) on `links` links at `line`,
    behind `buckets`; on the model without buckets when `buckets` is empty."""
    sched = Scheduler(0)
    net = FluidNet(sched, [line] * links, [0.0] * links)
    if buckets:
        net = BucketFluidNet(sched, [line] * links, [0.0] * links)
        net.shape(buckets)
    done = [0] * len(messages)

    def arrived(m: Msg) -> None:
        done[m.ctx] = m.t_arrive

    for i, (t, keys, size) in enumerate(messages):
        sched.at(t, net.send, Msg(0, 1, size, keys, None, 0.0, 0, arrived, ctx=i))
    sched.run_before(math.inf)
    return done


def _through(size: float, level: float, start: float = 0.0) -> float:
    """When `size` bytes are through a bucket holding `level` bytes (at C until it is empty, then at R)."""
    t_empty = level / (C - R)
    return start + (size / C if size <= C * t_empty else t_empty + (size - C * t_empty) / R)


def test_a_message_takes_the_burst_at_the_line_rate_then_the_token_rate() -> None:
    size = 1_000_000
    both = {0: (R, B), 1: (R, B)}  # the sender's and the receiver's ends, as tc tbf on both ends
    (done,) = _arrivals([(0, (0, 1), size)], both)
    assert done == pytest.approx(_through(size, B), abs=OWED)
    # sooner than a link at the token rate by the bucket's B / R (4 ms), whatever the line rate
    assert size / R - done == pytest.approx(B / R, abs=OWED)
    # a message smaller than the bucket leaves at the line rate
    (small,) = _arrivals([(0, (0, 1), 50_000)], both)
    assert small == pytest.approx(50_000 / C, abs=1)


@pytest.mark.parametrize("pause_ns", [2_000_000, 10_000_000])
def test_a_pause_refills_the_bucket_at_the_token_rate(pause_ns: int) -> None:
    size = 1_000_000
    first = _through(size, B)
    start = math.ceil(first) + pause_ns
    done = _arrivals([(0, (0,), size), (start, (0,), size)], {0: (R, B)})
    assert done[0] == pytest.approx(first, abs=OWED)
    level = min(B, R * (start - first))  # empty when the first left; full again after 4 ms
    assert done[1] == pytest.approx(_through(size, level, start), abs=2 * OWED)


def test_flows_sharing_a_link_share_its_burst_and_then_its_token_rate() -> None:
    size = 400_000
    done = _arrivals([(0, (0, 1), size), (0, (0, 2), size)], {0: (R, B)})
    t_empty = B / (C - R)  # both at C / 2 until the bucket is spent, then at R / 2
    assert done[0] == done[1] == pytest.approx(t_empty + (size - C / 2 * t_empty) / (R / 2), abs=2 * OWED)


messages = st.lists(st.tuples(st.integers(0, 5_000_000), st.integers(1, 400_000)), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(messages, st.floats(1_000.0, 300_000.0))
def test_a_link_never_beats_its_bucket_nor_falls_behind_its_token_rate(msgs: list[tuple[int, int]],
                                                                       bucket: float) -> None:
    """Every message on one link behind a bucket: all are through no sooner than the bucket allows
    (at most B + R t bytes by t, and what a ns takes at C beyond it: the one after the bucket ran
    out, and each flow's last, which the fluid model ends at the whole ns before its last byte)
    and no later than on a link of the token rate."""
    sent = [(t, (0,), size) for t, size in msgs]
    done = _arrivals(sent, {0: (R, bucket)}, links=1)
    total = sum(size for _, size in msgs)
    assert max(done) >= (total - bucket - C * (1 + len(msgs))) / R
    late = _arrivals(sent, {}, links=1, line=R)
    assert max(done) <= max(late) + len(msgs)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2_000_000), st.sampled_from([(0, 1), (0, 2), (1, 2), (2,)]),
                          st.integers(1, 400_000)), min_size=1, max_size=8))
def test_buckets_that_never_run_out_change_nothing(msgs: list[tuple[int, tuple[int, ...], int]]) -> None:
    """Tokens at the line rate or faster: the same arrivals, to the ns, as the model without buckets."""
    assert _arrivals(msgs, {0: (C, 1_000.0), 2: (2 * C, 5_000.0)}) == _arrivals(msgs, {})


def _scenario(congestion_topology: dict[str, object]) -> Scenario:
    return Scenario.model_validate({
        "name": "tb", "model": "small_cnn", "parallelism": {"dp": 2},
        "training": {"batch_size_per_worker": 16, "iterations": 3},
        "topology": {"kind": "switch", "npus": 2, "bandwidth_gbps": 10.0, "latency_ns": 1000.0,
                     **congestion_topology}})


def test_a_scenario_behind_buckets_runs_on_the_python_engine(tmp_path: Path) -> None:
    from simstudy.backends import simulate

    bucket = {"token_bucket": {"rate_gbps": 0.2, "burst_kib": 100_000 / 1024}}
    shaped = simulate(_scenario(bucket), tmp_path / "shaped", BackendSpec())
    d = shaped.details
    assert d["engine"] == "python" and "token buckets" in d["engine_python_because"]
    assert d["token_buckets"] == 4 and d["buckets_emptied"] > 0 and not d["identical_ranks"]
    slow = simulate(_scenario({"bandwidth_gbps": 0.2}), tmp_path / "slow", BackendSpec())
    fast = simulate(_scenario({}), tmp_path / "fast", BackendSpec())
    # between a link of the line rate and one of the token rate: the first exchange starts with a
    # full bucket (B / R = 4 ms sooner), the others with what the pauses between them refilled
    f_shaped, f_slow, f_fast = (r.ranks[0].finish_ns for r in (shaped, slow, fast))
    assert f_fast < f_shaped < f_slow
    assert B / R - 1e3 < f_slow - f_shaped <= 3 * B / R


@pytest.mark.parametrize(("backend", "congestion"), [("flowsim", "unaware"), ("flowsim", "aware"),
                                                     ("astrasim", "unaware")])
def test_backends_without_buckets_refuse_them(backend: str, congestion: str) -> None:
    from simstudy.backends.registry import check_network

    spec = BackendSpec.model_validate({"name": backend, "congestion": congestion})
    with pytest.raises(SpecError, match="token_bucket") as err:
        check_network(_scenario({"token_bucket": {"rate_gbps": 0.2, "burst_kib": 32}}), spec, "s.yaml")
    assert err.value.field == "topology.token_bucket" and "fluid" in err.value.message
    check_network(_scenario({}), spec, "s.yaml")  # no bucket: nothing to refuse


def test_validate_gives_a_shaped_capture_its_buckets() -> None:
    """A capture whose links tc tbf shaped (the kept meta.json of a 2-worker DDP job at 200 Mbit/s)
    is simulated on links at the veths' rate behind its bucket at the recorded goodput; a capture
    on one host, and a topology with a bucket of its own, stay as they are."""
    from simstudy.traffic.meta import read_meta
    from simstudy.validation import VETH_GBPS, bucket_scenario, capture_bucket_kib

    meta = read_meta(Path(__file__).parents[1] / "data" / "testbed_meta" / "ddp_cnn_w2_200mbit_loss1")
    assert meta is not None and meta.scenario is not None and meta.link is not None
    recorded = Scenario.model_validate(meta.scenario)
    goodput = recorded.topology.bandwidth_gbps  # type: ignore[union-attr]
    shaped = bucket_scenario(recorded, meta)
    bucket = shaped.topology.token_bucket  # type: ignore[union-attr]
    assert shaped.topology.bandwidth_gbps == VETH_GBPS and bucket is not None  # type: ignore[union-attr]
    assert bucket.rate_gbps == pytest.approx(goodput)
    assert capture_bucket_kib(meta) == pytest.approx(200e6 / 8 * 0.010 / 1024)
    assert bucket.burst_kib == pytest.approx(capture_bucket_kib(meta) * goodput / 0.2)
    assert bucket_scenario(shaped, meta) == shaped
    one_host = meta.model_copy(update={"link": meta.link.model_copy(update={"where": "loopback"})})
    assert bucket_scenario(recorded, one_host) == recorded
    assert json.loads(shaped.model_dump_json())["topology"]["kind"] == "switch"
