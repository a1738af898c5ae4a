"""Parameter-server data parallelism with point-to-point SEND/RECV.

Parameters are sharded by bytes over the servers in layer order; server `s` owns bytes
[s*P/S, (s+1)*P/S) of the gradient. Gradients are pushed per DDP-style bucket as soon as the
bucket's backward is done: for each bucket and each server, the worker sends the part of the
bucket that server owns. A server sums the pieces, updates its shard and sends the new
parameters back (the pull).

* sync: a server waits for the piece from every worker before one update, then replies to all;
  a worker starts its next iteration once it has every piece of its parameters back. A real
  server sends its replies at once (gloo isends share the link, and all of them end together),
  but a rank has one send in flight at a time in ASTRA-SIM's workload model, which would answer
  the workers one after another and let the first ones start early. So each reply is cut into
  REPLY_SLICES slices sent round-robin over the workers: they all finish within a slice's time
  of each other, as fair sharing does.
* async: a server updates and replies to each worker's piece on its own, without waiting for
  the other workers.
* `rendezvous` (default): gloo's send and receive meet. A send moves no bytes until the receiver
  has posted its receive and said so with a notify-recv-ready op (a 48-byte preamble,
  READY_BYTES). A captured worker posts its pulls once its whole backward is done (it receives
  into its parameters, which backward still reads), so each worker sends every server a ready
  message per piece at the end of its backward, before the pushes that wait for the same moment,
  and a reply waits for that worker's ready message: replies come after the workers' backward,
  even those of buckets pushed early. Without it (an eager transport, as BytePS and ps-lite use),
  each reply leaves as soon as the server has updated.
  The other half of the rendezvous is not modelled: a server posts a piece's receives right
  after replying to the piece before, so a worker's next push waits behind the reply to it on
  their connection. A rank here has one send in flight at a time, not one per peer, so that
  ready message would wait for the replies to every worker, and a link-bound job would lose
  the overlap of pushes and replies it has (a 2-worker LSTM at 200 Mbit/s: 442 ms per
  iteration against 349 ms captured and 359 ms without it).

Colocated servers run on worker ranks 0..S-1; the shard a worker hosts itself never crosses
the network. Dedicated servers are ranks dp..dp+S-1.
"""

from __future__ import annotations

from dataclasses import dataclass

from simstudy.compiler.costs import Bucket, LayerCost, ddp_buckets, layer_costs, optimizer_us, whole_us
from simstudy.compiler.graph import ExecutionGraph, RankGraph
from simstudy.compiler.passes import backward, forward
from simstudy.spec import ParameterServer, Scenario

PUSH, PULL = 0, 1
#: Bytes of the message that says a receive is posted (`rendezvous`): gloo's notify-recv-ready
#: op, a preamble of six 8-byte words.
READY_BYTES = 48
#: The tag part of a ready message: it goes the way of the push, whose tag uses part 0 only, on
#: the push's connection (gloo writes it there): its flow, as chunk 1.
READY_PART = 1
#: Slices per sync reply, sent round-robin over the workers (see the module docstring).
REPLY_SLICES = 8


@dataclass(frozen=True, slots=True)
class Piece:
    """The bytes of one bucket that one server owns."""

    bucket: int
    server: int
    size_bytes: int
    ready_layer: int
    offset_bytes: int = 0  # where the piece starts in the flat gradient (layers in order)


def pieces(costs: list[LayerCost], buckets: list[Bucket], servers: int) -> list[Piece]:
    """Split every bucket by the server shards its bytes fall in."""
    offsets: list[int] = []
    total = 0
    for c in costs:
        offsets.append(total)
        total += c.grad_bytes
    bounds = [s * total // servers for s in range(servers + 1)]
    out: list[Piece] = []
    for b in buckets:
        lo = min(offsets[i] for i in b.layers)
        hi = max(offsets[i] + costs[i].grad_bytes for i in b.layers)
        for s in range(servers):
            start = max(lo, bounds[s])
            size = min(hi, bounds[s + 1]) - start
            if size > 0:
                out.append(Piece(b.index, s, size, b.ready_after, start))
    return out


def tag_number(it: int, bucket: int, server: int, n_buckets: int, servers: int, direction: int, part: int = 0) -> int:
    """The message tag of a piece's push or pull (slice `part` of a sliced reply); captured jobs
    use the same numbering, sending each reply whole with the first slice's tag."""
    return (((it * n_buckets + bucket) * servers + server) * 2 + direction) * REPLY_SLICES + part


def slices(size_bytes: int, parts: int) -> list[int]:
    """`size_bytes` cut into at most `parts` near-equal non-empty slices (larger ones first)."""
    n = max(1, min(parts, size_bytes))
    return [size_bytes // n + (1 if i < size_bytes % n else 0) for i in range(n)]


def compile_parameter_server(scenario: Scenario) -> ExecutionGraph:
    """The execution graph of data parallelism through parameter servers."""
    agg = scenario.parallelism.aggregation
    if not isinstance(agg, ParameterServer):
        raise ValueError("compile_parameter_server needs aggregation kind parameter_server")
    ps = _PsGraph(scenario, agg)
    for it in range(scenario.training.iterations):
        local_ready: dict[tuple[int, int], int] = {}
        for w in range(ps.workers):
            ps.worker(it, w, local_ready)
        for piece in ps.parts:
            ps.server(it, piece, local_ready)
    return ExecutionGraph(ranks=ps.graphs)


class _PsGraph:
    """The graphs of one parameter-server scenario, built iteration by iteration: each worker's
    forward, backward, pushes and pulls (`worker`), then each piece's server side (`server`)."""

    def __init__(self, scenario: Scenario, agg: ParameterServer) -> None:
        p = scenario.parallelism
        self.scenario, self.agg, self.overlap = scenario, agg, p.overlap
        self.model = scenario.resolved_model
        self.costs = layer_costs(scenario, self.model)
        self.buckets = ddp_buckets(self.costs, p.bucket_size_bytes)
        self.parts = pieces(self.costs, self.buckets, agg.servers)
        self.dtype = scenario.training.dtype_bytes
        self.workers = p.dp
        self.graphs = [RankGraph(rank=r) for r in range(p.total_ranks)]
        self.hosts = agg.server_hosts(self.workers)
        #: what each worker's next forward waits for (its pulls of the iteration before)
        self.after: list[list[int]] = [[] for _ in range(self.workers)]

    def tag(self, it: int, piece: Piece, direction: int, part: int = 0) -> int:
        return tag_number(it, piece.bucket, piece.server, len(self.buckets), self.agg.servers, direction, part)

    def reply_slices(self, piece: Piece) -> list[int]:
        remote = self.workers - (1 if self.hosts[piece.server] < self.workers else 0)
        return slices(piece.size_bytes, REPLY_SLICES if self.agg.mode == "sync" and remote > 1 else 1)

    def update_us(self, piece: Piece) -> int:
        return whole_us(optimizer_us(self.scenario, self.model, params=piece.size_bytes // self.dtype))

    def worker(self, it: int, w: int, local_ready: dict[tuple[int, int], int]) -> None:
        """Worker `w`'s iteration: forward, backward, push each piece when its bucket is ready, receive pulls."""
        agg, hosts, g = self.agg, self.hosts, self.graphs[w]
        fwd = forward(g, self.costs, it, self.after[w])
        bwd = backward(g, self.costs, it, [fwd[-1]])
        done = bwd[self.costs[0].index]
        pulls: list[int] = []
        if agg.rendezvous:  # before the pushes that wait for the same end of backward, as the worker posts them
            for piece in self.parts:
                if hosts[piece.server] != w:
                    g.send(f"recv_ready.b{piece.bucket}.s{piece.server}.it{it}", hosts[piece.server],
                           READY_BYTES, self.tag(it, piece, PUSH, READY_PART), [done], op="pull", iteration=it,
                           flow=self.tag(it, piece, PUSH), chunk=READY_PART)
        for piece in self.parts:
            dep = bwd[piece.ready_layer] if self.overlap else done
            host = hosts[piece.server]
            if host == w:
                local_ready[(w, piece.bucket * agg.servers + piece.server)] = dep
                continue
            name = f"b{piece.bucket}.s{piece.server}.it{it}"
            push = g.send(f"push.{name}", host, piece.size_bytes, self.tag(it, piece, PUSH), [dep], op="push",
                          iteration=it)
            parts_of = self.reply_slices(piece)
            for c, size in enumerate(parts_of):
                suffix = f".c{c}" if len(parts_of) > 1 else ""
                pulls.append(g.recv(f"pull.{name}{suffix}", host, size, self.tag(it, piece, PULL, c), [push],
                                    op="pull", iteration=it))
        self.after[w] = pulls if pulls else [done]

    def server(self, it: int, piece: Piece, local_ready: dict[tuple[int, int], int]) -> None:
        """The server side of one piece in one iteration: receive it, update, send parameters back."""
        agg, host = self.agg, self.hosts[piece.server]
        g = self.graphs[host]
        remote = [w for w in range(self.workers) if w != host]
        local = local_ready.get((host, piece.bucket * agg.servers + piece.server))
        name = f"b{piece.bucket}.s{piece.server}.it{it}"
        recv_ready = {w: [g.recv(f"recv_ready.{name}.w{w}", w, READY_BYTES, self.tag(it, piece, PUSH, READY_PART),
                                 [], op="pull", iteration=it)] if agg.rendezvous else [] for w in remote}
        if agg.mode == "sync":
            recvs = [g.recv(f"recv_grad.{name}.w{w}", w, piece.size_bytes, self.tag(it, piece, PUSH), [],
                            op="push", iteration=it) for w in remote]
            deps = recvs + ([local] if local is not None else [])
            upd = g.compute(f"update.{name}", self.update_us(piece), deps, iteration=it)
            parts_of = self.reply_slices(piece)
            for c, size in enumerate(parts_of):  # round-robin: slice c to every worker, then c + 1
                suffix = f".c{c}" if len(parts_of) > 1 else ""
                for w in remote:
                    g.send(f"send_param.{name}.w{w}{suffix}", w, size, self.tag(it, piece, PULL, c),
                           [upd, *recv_ready[w]], op="pull", iteration=it, flow=self.tag(it, piece, PULL), chunk=c)
            if local is not None:
                self.after[host].append(upd)
            return
        for w in remote:
            r = g.recv(f"recv_grad.{name}.w{w}", w, piece.size_bytes, self.tag(it, piece, PUSH), [],
                       op="push", iteration=it)
            upd = g.compute(f"update.{name}.w{w}", self.update_us(piece), [r], iteration=it)
            g.send(f"send_param.{name}.w{w}", w, piece.size_bytes, self.tag(it, piece, PULL),
                   [upd, *recv_ready[w]], op="pull", iteration=it)
        if local is not None:
            upd = g.compute(f"update.{name}.w{host}", self.update_us(piece), [local], iteration=it)
            self.after[host].append(upd)
