# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
# distutils: language = c++
"""flowsim's compiled core: the event queue, ASTRA-SIM's workload and system layers and the three network
models in C++.

Each class here is its Python counterpart, event for event, with its state in C++ containers:

* `CoreNodes` - `engine.Engine`'s walk of each rank's graph (ASTRA-SIM's workload layer): which
  node is issued when, compute nodes' times, every node's span; it calls Python to start
  collectives, sends and receives;
* `CoreScheduler` - `sched.Scheduler`: events in (time, priority, insertion) order. An event is
  either a Python call (what the engine, the hosts and every Python model put there) or one of
  the core's own (a flow's drain, a component's recompute, a message's arrival, a collective's
  next step), which runs without Python;
* `CoreCollectiveRun` - `system.CollectiveRun`: one collective executed rank by rank, its
  messages handed to a core model without a Python object per message, and recorded in columns
  (`on_batch` receives them in blocks);
* `CoreFluid`, `CoreUnaware`, `CoreAware` - `netmodels.FastFluidNet`, `UnawareNet`, `AwareNet`.
  The fluid model's arithmetic is `netmodels`' operation for operation (`_fill_small` for
  components of at most 12 flows, `_fill_numpy`'s order of sums above).

Every event is put on the queue at the point the Python engine puts it there, so the insertion
numbers, and with them the order of simultaneous events, are the same: finish times and traffic
equal the Python engine's to the nanosecond (tests/backends/test_engines.py, and every fast-path
and solver property test, which run on this engine by default).
"""

import numpy as np

from libc.math cimport INFINITY
from libc.stdint cimport int32_t, int64_t, uint64_t, INT64_MAX
from libc.string cimport memcpy
from libcpp.vector cimport vector
from libcpp.deque cimport deque
from libcpp.map cimport map as cmap
from libcpp.unordered_map cimport unordered_map
from libcpp.algorithm cimport sort, make_heap, push_heap, pop_heap
from libcpp.functional cimport greater
from libcpp.utility cimport pair
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from cython.operator cimport dereference as deref

cdef extern from *:
    """
    #include <vector>
    #include <unordered_map>
    #include <cstdint>
    // a component's routes (in order) -> its rates: hashed, so a lookup reads the routes once
    struct SimRoutesHash {
        size_t operator()(const std::vector<int>& v) const noexcept {
            uint64_t h = 1469598103934665603ULL ^ v.size();
            for (int x : v) { h ^= (uint64_t)(uint32_t)x; h *= 1099511628211ULL; }
            return (size_t)(h ^ (h >> 29));
        }
    };
    struct SimSolved {
        std::unordered_map<std::vector<int>, std::vector<double>, SimRoutesHash> map;
        const std::vector<double>* get(const std::vector<int>& k) const {
            auto it = map.find(k);
            return it == map.end() ? nullptr : &it->second;
        }
        void put(const std::vector<int>& k, const std::vector<double>& v) { map[k] = v; }
        void clear() { map.clear(); }
    };

    // the queue's two 4-ary heaps (four children side by side in memory): buckets by (time,
    // priority, first insertion), moved drains by (time, insertion); a drain's place is kept in
    // `pos` by slot
    struct SimItem { int64_t t; int64_t key; int64_t b; };
    struct SimDrain { int64_t t; int64_t seq; int64_t slot; };
    // without branches: which of two events comes first is as good as a coin toss to a predictor
    static inline bool sim_before(const SimItem& x, const SimItem& y) {
        return (x.t < y.t) | ((x.t == y.t) & (x.key < y.key));
    }
    static inline bool sim_before(const SimDrain& x, const SimDrain& y) {
        return (x.t < y.t) | ((x.t == y.t) & (x.seq < y.seq));
    }
    static inline void sim_place(std::vector<SimItem>& h, size_t i, const SimItem& x, int64_t*) { h[i] = x; }
    static inline void sim_place(std::vector<SimDrain>& h, size_t i, const SimDrain& x, int64_t* pos) {
        h[i] = x;
        pos[x.slot] = (int64_t)i;
    }
    static inline int sim_ctz(uint64_t x) { return __builtin_ctzll(x); }
    // a free place in `items` (one given back to `free`, else a new one at the end)
    template <class T, class I> I sim_alloc(std::vector<T>& items, std::vector<I>& free) {
        if (free.empty()) {
            items.resize(items.size() + 1);
            return (I)(items.size() - 1);
        }
        I at = free.back();
        free.pop_back();
        return at;
    }
    // a pair onto a vector, constructed in place (a pair built on the stack and copied is read back
    // in one wide load from two narrower stores, which the processor does not forward)
    static inline void sim_pair(std::vector<std::pair<int64_t, int>>& v, int64_t a, int b) { v.emplace_back(a, b); }
    static inline void sim_pair(std::vector<std::pair<int64_t, int64_t>>& v, int64_t a, int64_t b) {
        v.emplace_back(a, b);
    }
    // `moving` by reference (never an entry of `h`): a struct built field by field and passed by value
    // is copied in wider loads than it was stored in, which the processor does not forward
    template <class T> void sim_up(std::vector<T>& h, size_t i, const T& moving, int64_t* pos) {
        while (i > 0) {
            size_t parent = (i - 1) >> 2;
            if (!sim_before(moving, h[parent])) break;
            sim_place(h, i, h[parent], pos);
            i = parent;
        }
        sim_place(h, i, moving, pos);
    }
    template <class T> void sim_down(std::vector<T>& h, size_t i, const T& moving, int64_t* pos) {
        size_t n = h.size();
        for (;;) {
            size_t first = 4 * i + 1;
            if (first >= n) break;
            size_t last = first + 4 < n ? first + 4 : n, child = first;
            for (size_t k = first + 1; k < last; ++k)
                if (sim_before(h[k], h[child])) child = k;
            if (!sim_before(h[child], moving)) break;
            sim_place(h, i, h[child], pos);
            i = child;
        }
        sim_place(h, i, moving, pos);
    }
    """
    cdef cppclass SimSolved:
        const vector[double]* get(const vector[int]& k)
        void put(const vector[int]& k, const vector[double]& v)
        void clear()
    # a bucket's place in the heap of buckets: its time, its priority (bits 62-63) and first event's
    # insertion number (below), and its number
    cdef struct SimItem:
        int64_t t
        int64_t key
        int64_t b
    # a moved drain event: its time, insertion number and slot
    cdef struct SimDrain:
        int64_t t
        int64_t seq
        int64_t slot
    int sim_ctz(uint64_t x) noexcept
    I sim_alloc[T, I](vector[T]& items, vector[I]& free) noexcept
    void sim_pair(vector[pair[int64_t, int]]& v, int64_t a, int b) noexcept
    void sim_pair(vector[pair[int64_t, int64_t]]& v, int64_t a, int64_t b) noexcept
    void sim_up[T](vector[T]& h, size_t i, const T& moving, int64_t* pos) noexcept
    void sim_down[T](vector[T]& h, size_t i, const T& moving, int64_t* pos) noexcept


cdef enum:
    #: Components of at most this many flows are filled as `netmodels._fill_small` does; larger
    #: ones as `_fill_numpy` (the same `_SMALL`).
    SMALL = 12
    #: Flows of the solutions kept at most (`FastFluidNet.MEMO`).
    MEMO = 1 << 20
    #: Events between two ticks (`sched.TICK`).
    TICK = 8192
    #: Messages of a collective recorded before they are handed on (`comms`: 65536 rows).
    BATCH = 65536
    #: Entries of a collective's plan (chunks x phases x messages stored) up to which a run keeps
    #: each entry's route by place, not only by (source, destination, size, flow)
    ROUTE_CACHE = 1 << 20
    #: The queue's cache of buckets by time and priority: 2 ** CACHE_BITS of them
    CACHE_BITS = 3
    CACHED = 1 << CACHE_BITS

cdef class OnQueue
cdef class CoreNet(OnQueue)
cdef class CoreFluid(CoreNet)
cdef class CoreAware(CoreNet)
cdef class CoreCollectiveRun(OnQueue)
cdef class CoreNodes


cdef enum Kind:
    EV_PY = 0        # obj(*args)
    EV_DRAIN = 1     # fluid: flow a of version b sent its last byte
    EV_RECOMPUTE = 2 # fluid: the rates of dirty set a
    EV_ARRIVE = 3    # a core model: message a has arrived
    EV_SEND = 4      # run: rank index a sends chunk b's step
    EV_LEAVE = 5     # run: rank index a leaves chunk b's phase
    EV_GENERAL = 6   # run: rank index a, chunk b, phase c: a step-0 message reduced (gated phase)
    EV_HOP = 7       # aware: message a done with hop b
    EV_FREE = 8      # aware: link a free
    EV_NODE = 9      # workload: rank a's node of index b is done (its compute time has passed)
    EV_COMM = 10     # workload: rank a's communication node of index b is done (its span is recorded)
    EV_GATHER = 11   # workload: the instant in which collective instance a was first issued is over


ctypedef SimItem Item
ctypedef SimDrain Drain


cdef struct Payload:
    int kind
    int64_t a
    int64_t b
    int64_t c
    PyObject* obj   # owned
    PyObject* args  # owned (EV_PY), else NULL
    int64_t seq     # the insertion number of the event queued in this slot (0: none)


cdef struct Bucket:
    # the events of one time and priority, in insertion order: (insertion number, slot) pairs, the
    # ones before `head` run; an entry whose slot's event has another insertion number was moved
    # (`update`) and is passed over
    int64_t t
    int64_t prio
    vector[pair[int64_t, int64_t]] items
    size_t head


cdef inline PyObject* _own(object x):
    """A reference the caller keeps (released with Py_XDECREF), or NULL for None."""
    if x is None:
        return NULL
    Py_INCREF(x)
    return <PyObject*>x


cdef int64_t _schedulers = 0
#: Core models made so far: each one's serial (what a route entry remembers it by)
cdef int64_t _models = 0


cdef inline int64_t _bucket_key(int64_t t, int64_t prio) noexcept nogil:
    return (t << 1) | prio


cdef inline int _cache_slot(int64_t key) noexcept nogil:
    return <int>((<uint64_t>key * <uint64_t>0x9E3779B97F4A7C15ULL) >> (64 - CACHE_BITS))


cdef class CoreScheduler:
    """`sched.Scheduler` in C++: the events in (time, priority, insertion) order, and the current time (ns).

    Events of one time and priority wait in one bucket, in insertion order (a ring's ranks step at the
    same instants: 17 events per instant in ResNet-50 on 1,024 GPUs of a leaf-spine, fluid, 143
    unaware), and the buckets in a 4-ary heap by (time, priority): that heap orders instants, not
    events. A flow's drain event is the exception: it moves when the flow's rate changes (`update`,
    each recompute of a large component moves many), so drains wait in a heap of their own whose
    places are known by slot, and an update moves one in place, with the time and insertion number
    a new event would get (the Python model leaves a stale event that does nothing instead, so the
    order of every event that does something is the same). The next event is the earlier of the
    first bucket's first and the first drain, by (time, priority, insertion)."""

    cdef public int64_t now
    cdef public int64_t seq
    cdef int64_t serial
    cdef vector[Item] heap          # buckets by (time, priority)
    cdef vector[Bucket] buckets
    cdef vector[int64_t] free_buckets
    # (time, priority) -> the bucket its events go to, for a few: direct-mapped by key, and the one
    # the last event went to. Several buckets of one time and priority may be queued: one whose key
    # left the cache takes no more events, so each bucket's insertion numbers all come before those of
    # a later bucket of its time and priority, and the heap orders buckets by their first one
    cdef int64_t cache_key[CACHED]
    cdef int64_t cache_bucket[CACHED]
    cdef int64_t last_key
    cdef int64_t last_bucket
    cdef vector[Drain] drains       # a 4-ary heap of drain events, their places by slot in `dpos`
    # events after every ordinary one of the current instant (priority 1 at `late_t`, the time it was
    # when they were queued, where no bucket of theirs was open): (insertion, slot), in order
    cdef vector[pair[int64_t, int64_t]] late
    cdef size_t late_head
    cdef int64_t late_t
    cdef vector[int64_t] dpos
    cdef vector[Payload] slab
    cdef vector[int64_t] free_slots
    cdef int64_t live
    cdef int64_t ran[12]
    cdef public int64_t peak  # events pending at most

    def __init__(self, int64_t now=0):
        global _schedulers
        cdef int k
        for k in range(12):
            self.ran[k] = 0
        _schedulers += 1
        self.serial = _schedulers
        self.now = now
        self.seq = 0
        self.last_key = -1
        self.last_bucket = -1
        for k in range(CACHED):
            self.cache_key[k] = -1

    def __dealloc__(self):
        cdef size_t i
        for i in range(self.slab.size()):  # every queued event, wherever it waits
            if self.slab[i].seq:
                Py_XDECREF(self.slab[i].obj)
                Py_XDECREF(self.slab[i].args)
                self.slab[i].seq = 0

    def __len__(self):
        return self.live

    @property
    def events_by_kind(self):
        """Events run so far, by kind (python, drain, recompute, arrive, send, leave, general, hop, free,
        node, comm, gather)."""
        return dict(zip(("python", "drain", "recompute", "arrive", "send", "leave", "general", "hop", "free", "node",
                         "comm", "gather"), [self.ran[k] for k in range(12)]))

    cdef int64_t push(self, int64_t t, int prio, int kind, object obj, int64_t a, int64_t b, int64_t c,
                      object args) noexcept:
        """Queue an event; its slot. (Its payload is written in place, field by field: a payload
        built on the stack and copied whole is read back in wider loads than it was written in,
        which the processor cannot forward from its stores.)"""
        cdef int64_t slot = self._slot()
        cdef Payload* pl = &self.slab[slot]
        pl.kind = kind
        pl.a = a
        pl.b = b
        pl.c = c
        pl.obj = _own(obj)
        pl.args = _own(args)
        self._queued(t, prio, slot)
        return slot

    cdef int64_t _slot(self) noexcept:
        """A free slot for an event."""
        cdef int64_t slot
        if self.free_slots.empty():
            slot = self.slab.size()
            self.slab.resize(slot + 1)
            self.dpos.push_back(-1)
        else:
            slot = self.free_slots.back()
            self.free_slots.pop_back()
        return slot

    cdef void _queued(self, int64_t t, int64_t prio, int64_t slot) noexcept:
        """The event in `slot` into the queue at (t, prio), with the next insertion number."""
        self.seq += 1
        self.slab[slot].seq = self.seq
        self._enter(t, prio, self.seq, slot)
        self.live += 1
        if self.live > self.peak:
            self.peak = self.live

    cdef int64_t _push(self, int64_t t, int64_t prio, Payload& pl) noexcept:
        cdef int64_t slot = self._slot()
        self.slab[slot] = pl
        self._queued(t, prio, slot)
        return slot

    cdef void _enter(self, int64_t t, int64_t prio, int64_t seq, int64_t slot) noexcept:
        """Put (seq, slot) at the end of the bucket of (t, prio), opened if none is queued; an event
        after the current instant's ordinary ones where no bucket of its is: on the late list (a
        fluid model's recompute, once per instant: a bucket of its own each, opened and closed in
        the heap of buckets, was a quarter of the buckets of ResNet-50 DP 256 fluid)."""
        cdef int64_t key = _bucket_key(t, prio)
        cdef int64_t b
        cdef int c
        if key == self.last_key:
            b = self.last_bucket
        else:
            c = _cache_slot(key)
            if self.cache_key[c] == key:
                b = self.cache_bucket[c]
            else:
                if prio == 1 and t == self.now:
                    if self.late_head == self.late.size():
                        self.late.clear()
                        self.late_head = 0
                        self.late_t = t
                    sim_pair(self.late, seq, slot)
                    return
                b = self._open(t, prio, seq)
                self.cache_key[c] = key
                self.cache_bucket[c] = b
            self.last_key = key
            self.last_bucket = b
        sim_pair(self.buckets[b].items, seq, slot)

    cdef int64_t _open(self, int64_t t, int64_t prio, int64_t seq) noexcept:
        """A bucket of (t, prio) whose first event has insertion number `seq`, into the heap."""
        cdef int64_t b = sim_alloc(self.buckets, self.free_buckets)
        cdef Bucket* bk = &self.buckets[b]
        bk.t = t
        bk.prio = prio
        bk.items.clear()
        bk.head = 0
        cdef Item moving
        moving.t = t
        moving.key = (prio << 62) | seq
        moving.b = b
        self.heap.push_back(moving)
        self._up(self.heap.size() - 1, moving)
        return b

    cdef inline void _up(self, size_t i, const Item& moving) noexcept:
        sim_up(self.heap, i, moving, NULL)

    cdef inline void _down(self, size_t i, const Item& moving) noexcept:
        sim_down(self.heap, i, moving, NULL)

    cdef inline void _dup(self, size_t i, const Drain& moving) noexcept:
        sim_up(self.drains, i, moving, self.dpos.data())

    cdef inline void _ddown(self, size_t i, const Drain& moving) noexcept:
        sim_down(self.drains, i, moving, self.dpos.data())

    cdef void _close_top(self) noexcept:
        """The first bucket is used up: out of the heap, free for another instant."""
        cdef int64_t b = self.heap[0].b
        cdef Bucket* bk = &self.buckets[b]
        cdef int64_t key = _bucket_key(bk.t, bk.prio)
        cdef int c = _cache_slot(key)
        if self.cache_key[c] == key and self.cache_bucket[c] == b:
            self.cache_key[c] = -1
        if self.last_key == key and self.last_bucket == b:
            self.last_key = -1
        bk.items.clear()
        bk.head = 0
        self.free_buckets.push_back(b)
        cdef Item last = self.heap.back()
        self.heap.pop_back()
        if self.heap.size():
            self._down(0, last)

    cdef bint _settle(self) noexcept:
        """Pass over moved entries and used-up buckets: whether an event is queued (then, where it
        is the first bucket's, at its head)."""
        cdef Bucket* bk
        cdef pair[int64_t, int64_t]* e
        while self.late_head < self.late.size() and self.slab[self.late[self.late_head].second].seq != \
                self.late[self.late_head].first:
            self.late_head += 1
        while self.heap.size():
            bk = &self.buckets[self.heap[0].b]
            while bk.head < bk.items.size():
                e = &bk.items[bk.head]
                if self.slab[e.second].seq == e.first:
                    return True
                bk.head += 1
            self._close_top()
        return not self.drains.empty() or self.late_head < self.late.size()

    cdef int _source(self) noexcept:
        """Where the first event waits (`_settle` found one): 0 the first bucket, 1 the drains' heap,
        2 the late list (after every ordinary event of its instant, and before every later one)."""
        cdef bint drain = self._drain_first()
        cdef Bucket* bk
        if self.late_head < self.late.size():
            if drain:
                return 1 if self.drains[0].t == self.late_t else 2
            if self.heap.empty():
                return 2
            bk = &self.buckets[self.heap[0].b]
            if bk.t == self.late_t and (bk.prio == 0 or bk.items[bk.head].first < self.late[self.late_head].first):
                return 0
            return 2
        return 1 if drain else 0

    cdef bint _drain_first(self) noexcept:
        """Whether the first drain comes before the first bucket's first event (`_settle` passed over
        the used-up ones)."""
        if self.drains.empty():
            return False
        if self.heap.empty():
            return True
        cdef Bucket* bk = &self.buckets[self.heap[0].b]
        cdef Drain* d = &self.drains[0]
        if d.t != bk.t:
            return d.t < bk.t
        return bk.prio > 0 or d.seq < bk.items[bk.head].first

    cdef int64_t _next_t(self) noexcept:
        cdef int source = self._source()
        return self.heap[0].t if source == 0 else self.drains[0].t if source == 1 else self.late_t

    cdef int64_t key_of(self, int64_t slot) noexcept:
        """The insertion number of the event queued in `slot`."""
        return self.slab[slot].seq

    cdef int64_t update(self, int64_t slot, int64_t key, int64_t t, int prio, int64_t b) noexcept:
        """Move the queued drain of `slot` (still the one of insertion number `key`) to time `t`,
        as if queued now (priority 0), with payload `b`; its new insertion number, or -1 when it is
        no longer queued."""
        if slot < 0 or slot >= <int64_t>self.slab.size() or key <= 0 or self.slab[slot].seq != key:
            return -1
        self.seq += 1
        self.slab[slot].seq = self.seq
        self.slab[slot].b = b
        cdef Drain moving
        moving.t = t
        moving.seq = self.seq
        moving.slot = slot
        if self.dpos[slot] < 0:  # in a bucket still: its entry there is passed over from now on
            self.drains.push_back(moving)
            self._dup(self.drains.size() - 1, moving)
            return self.seq
        cdef size_t i = self.dpos[slot]
        # a larger insertion number: it moves up only where its time is earlier than before
        if t < self.drains[i].t:
            self._dup(i, moving)
        else:
            self._ddown(i, moving)
        return self.seq

    def at(self, int64_t t, fn, *args):
        self.push(t, 0, EV_PY, fn, 0, 0, 0, args)

    def after_all(self, int64_t t, fn, *args):
        """Run `fn` at `t`, after every ordinary event of that time."""
        self.push(t, 1, EV_PY, fn, 0, 0, 0, args)

    cdef void _dispatch(self, int kind, PyObject* pobj, int64_t a, int64_t b, int64_t c, PyObject* args) except *:
        cdef object obj = <object>pobj
        if kind == EV_PY:
            obj(*(<object>args))
        elif kind == EV_DRAIN:
            (<CoreFluid>obj)._drain(a, b)
        elif kind == EV_RECOMPUTE:
            (<CoreFluid>obj)._recompute(a)
        elif kind == EV_ARRIVE:
            (<CoreNet>obj)._arrive(<int>a)
        elif kind == EV_SEND:
            (<CoreCollectiveRun>obj)._send(<int>a, <int>b)
        elif kind == EV_LEAVE:
            (<CoreCollectiveRun>obj)._leave(<int>a, <int>b)
        elif kind == EV_GENERAL:
            (<CoreCollectiveRun>obj)._general(<int>a, <int>b, <int>c)
        elif kind == EV_HOP:
            (<CoreAware>obj)._hop_done(<int>a, <int>b)
        elif kind == EV_FREE:
            (<CoreAware>obj)._free(<int>a)
        elif kind == EV_NODE:
            (<CoreNodes>obj)._on_done(<int>a, <int>b)
        elif kind == EV_COMM:
            (<CoreNodes>obj)._comm_done(<int>a, b)
        elif kind == EV_GATHER:
            (<CoreNodes>obj)._instant_over(a)

    cdef Payload _take(self) noexcept:
        """The first event (`_settle` found one): out of the queue, its slot free, the time its own."""
        cdef int64_t slot = self._take_slot()
        cdef Payload ev = self.slab[slot]
        self._free_slot(slot)
        return ev

    cdef inline void _free_slot(self, int64_t slot) noexcept:
        self.slab[slot].seq = 0
        self.free_slots.push_back(slot)
        self.live -= 1

    cdef int64_t _take_slot(self) noexcept:
        """The first event's slot (`_settle` found one): out of the queue (the slot not free yet),
        the time its own."""
        cdef Bucket* bk
        cdef int64_t slot
        cdef Drain d, last
        cdef int source = self._source()
        if source == 2:
            slot = self.late[self.late_head].second
            self.late_head += 1
            self.now = self.late_t
        elif source == 1:
            d = self.drains[0]
            slot = d.slot
            self.now = d.t
            self.dpos[slot] = -1
            last = self.drains.back()
            self.drains.pop_back()
            if self.drains.size():
                self._ddown(0, last)
        else:
            bk = &self.buckets[self.heap[0].b]
            slot = bk.items[bk.head].second
            bk.head += 1
            self.now = bk.t
        return slot

    cdef void _run_one(self) except *:
        cdef int64_t slot = self._take_slot()
        cdef Payload* ev = &self.slab[slot]
        cdef int kind = ev.kind
        cdef PyObject* obj = ev.obj
        cdef PyObject* args = ev.args
        cdef int64_t a = ev.a, b = ev.b, c = ev.c
        self._free_slot(slot)
        self.ran[kind] += 1
        try:
            self._dispatch(kind, obj, a, b, c, args)
        finally:
            Py_XDECREF(obj)
            Py_XDECREF(args)

    def run_before(self, t_stop, tick=None):
        """Run every event earlier than `t_stop` (`math.inf`: every event); `tick()` every `TICK`
        events."""
        cdef bint forever = t_stop == INFINITY
        cdef int64_t stop = 0 if forever else int(t_stop)
        cdef int64_t n = 0
        while self._settle() and (forever or self._next_t() < stop):
            self._run_one()
            n += 1
            if tick is not None and n % TICK == 0:
                tick()

    def drain_into(self, CoreScheduler other):
        """Move every pending event to `other`, in this queue's order."""
        cdef Payload pl
        cdef int64_t t, prio, now = self.now
        cdef int source
        while self._settle():
            source = self._source()
            if source == 2:
                t = self.late_t
                prio = 1
            elif source == 1:
                t = self.drains[0].t
                prio = 0
            else:
                t = self.heap[0].t
                prio = (self.heap[0].key >> 62) & 3
            pl = self._take()
            other._push(t, prio, pl)
        self.now = now


# -- the network models ---------------------------------------------------------------------------


cdef struct Message:
    int64_t src
    int64_t dst
    int64_t size
    int route
    double latency
    int64_t alone
    int64_t t_send
    int64_t t_arrive
    PyObject* pymsg  # a Python `Msg` (owned), or NULL for a core run's message
    PyObject* run    # the core run it belongs to (owned), or NULL
    int i
    int c
    int p
    int st


cdef class OnQueue:
    """What runs on a `CoreScheduler`: its queue, which a replay swaps (`comms.Comms._replay`)."""

    cdef CoreScheduler _sched

    @property
    def sched(self):
        return self._sched

    @sched.setter
    def sched(self, CoreScheduler value):
        self._sched = value


cdef class CoreNet(OnQueue):
    """What every core model offers: `send(msg)` a Python `Msg` now, or a core run's message
    (`_send_native`); routes are held once each (their keys and multiplicities) by number."""

    cdef public list capacity
    cdef public list latency
    cdef readonly int64_t serial
    cdef vector[Message] msgs
    cdef vector[int] free_msgs
    cdef dict route_ids
    cdef vector[int] route_ptr
    cdef vector[int] route_keys
    cdef vector[int64_t] route_mult

    name = ""
    timed_alone = True
    clock = None
    shares = None

    def __init__(self, CoreScheduler sched, capacity, latency):
        global _models
        _models += 1
        self.serial = _models
        self._sched = sched
        # the network's lists themselves, read only (a collective timed alone makes a model of its
        # own: copies of every link's numbers per model were 0.2 GB on 4,096 GPUs)
        self.capacity = capacity if type(capacity) is list else list(capacity)
        self.latency = latency if type(latency) is list else list(latency)
        self.route_ids = {}
        self.route_ptr.push_back(0)

    def __dealloc__(self):
        cdef size_t i
        for i in range(self.msgs.size()):
            Py_XDECREF(self.msgs[i].pymsg)
            Py_XDECREF(self.msgs[i].run)
        self.msgs.clear()

    cpdef int route_id(self, tuple keys, object mult) except -1:
        """The number of a route (its link keys and their multiplicities, None: 1 each)."""
        if mult is None:
            mult = (1,) * len(keys)
        key = (keys, mult)
        rid = self.route_ids.get(key)
        if rid is None:
            rid = self.route_ids[key] = len(self.route_ids)
            for k in keys:
                self.route_keys.push_back(k)
            for m in mult:
                self.route_mult.push_back(m)
            self.route_ptr.push_back(self.route_keys.size())
        return rid

    cdef int _new_msg(self, int64_t src, int64_t dst, int64_t size, int route, double latency, int64_t alone,
                      object pymsg, object run, int i, int c, int p, int st) except -1:
        cdef int mid = sim_alloc(self.msgs, self.free_msgs)
        cdef Message* m = &self.msgs[mid]
        m.src = src
        m.dst = dst
        m.size = size
        m.route = route
        m.latency = latency
        m.alone = alone
        m.t_send = self._sched.now
        m.t_arrive = 0
        m.i = i
        m.c = c
        m.p = p
        m.st = st
        m.pymsg = _own(pymsg)
        m.run = _own(run)
        return mid

    def send(self, msg):
        """A Python `Msg`, now (`NetModel.send`)."""
        msg.t_send = self._sched.now
        keys = msg.keys
        rid = self.route_id(keys, msg.mult) if keys else -1
        mid = self._new_msg(msg.src, msg.dst, msg.size, rid, msg.latency, msg.alone_ns, msg, None, 0, 0, 0, 0)
        self._start(mid)

    cdef void _send_native(self, CoreCollectiveRun run, int64_t src, int64_t dst, int64_t size, int route,
                           double latency, int64_t alone, int i, int c, int p, int st) except *:
        cdef int mid = self._new_msg(src, dst, size, route, latency, alone, None, run, i, c, p, st)
        self._start(mid)

    cdef void _start(self, int mid) except *:
        raise NotImplementedError

    cdef int _nkeys(self, int route) noexcept:
        if route < 0:
            return 0
        return self.route_ptr[route + 1] - self.route_ptr[route]

    cdef void _arrive(self, int mid) except *:
        """Message `mid` has arrived now: its run, or its Python `Msg`'s `deliver`, learns of it."""
        cdef Message* m = &self.msgs[mid]
        m.t_arrive = self._sched.now
        cdef Message copy = m[0]
        m.pymsg = NULL
        m.run = NULL
        self.free_msgs.push_back(mid)
        cdef object msg
        cdef object run
        if copy.pymsg != NULL:
            msg = <object>copy.pymsg
            Py_XDECREF(copy.pymsg)
            msg.t_arrive = copy.t_arrive
            msg.deliver(msg)
        else:
            run = <object>copy.run
            Py_XDECREF(copy.run)
            (<CoreCollectiveRun>run)._arrive(copy)


cdef class CoreUnaware(CoreNet):
    """`netmodels.UnawareNet`: a message takes its uncontended time."""

    name = "unaware"

    cdef void _start(self, int mid) except *:
        cdef CoreScheduler s = self._sched
        s.push(s.now + self.msgs[mid].alone, 0, EV_ARRIVE, self, mid, 0, 0, None)


cdef class CoreAware(CoreNet):
    """`netmodels.AwareNet`: store and forward hop by hop, each link one message at a time, FIFO."""

    cdef vector[char] busy
    cdef vector[deque[pair[int, int]]] waiting

    name = "aware"

    def __init__(self, CoreScheduler sched, capacity, latency):
        super().__init__(sched, capacity, latency)
        self.busy.resize(len(self.capacity), 0)
        self.waiting.resize(len(self.capacity))

    cdef void _start(self, int mid) except *:
        cdef CoreScheduler s = self._sched
        if self._nkeys(self.msgs[mid].route) == 0:
            s.push(s.now, 0, EV_ARRIVE, self, mid, 0, 0, None)
            return
        self._enter(mid, 0)

    cdef void _enter(self, int mid, int hop) except *:
        cdef int key = self.route_keys[self.route_ptr[self.msgs[mid].route] + hop]
        if self.busy[key]:
            self.waiting[key].push_back(pair[int, int](mid, hop))
        else:
            self._transmit(key, mid, hop)

    cdef void _transmit(self, int key, int mid, int hop) except *:
        self.busy[key] = 1
        cdef CoreScheduler s = self._sched
        cdef double ser = <double>self.msgs[mid].size / <double>self.capacity[key]
        s.push(s.now + <int64_t>(<double>self.latency[key] + ser), 0, EV_HOP, self, mid, hop, 0, None)
        s.push(s.now + <int64_t>ser, 0, EV_FREE, self, key, 0, 0, None)

    cdef void _hop_done(self, int mid, int hop) except *:
        if hop + 1 == self._nkeys(self.msgs[mid].route):
            self._arrive(mid)
        else:
            self._enter(mid, hop + 1)

    cdef void _free(self, int key) except *:
        self.busy[key] = 0
        cdef pair[int, int] nxt
        if not self.waiting[key].empty():
            nxt = self.waiting[key].front()
            self.waiting[key].pop_front()
            self._transmit(key, nxt.first, nxt.second)


cdef struct Flow:
    int64_t seq
    int route
    int msg
    int64_t ev_sched  # the queue (its serial), slot and order key of its drain event
    int64_t ev_slot
    int64_t ev_key
    double remaining
    double rate
    int64_t t_upd
    int64_t version
    bint const_
    bint live


cdef class CoreFluid(CoreNet):
    """`netmodels.FastFluidNet`: max-min fair flows, rates recomputed once per instant over the
    component a change touches, a component's rates looked up when its routes were solved before."""

    cdef public int64_t sent
    cdef public int64_t recomputes
    cdef public int64_t reused
    cdef vector[double] cap
    cdef vector[Flow] flows
    cdef vector[int] free_ids
    # link -> routes on it, every one that carries flows and some that no longer do: a route whose
    # last flow drains stays on its links' lists where none of them carries another route (a ring's
    # next step mostly takes the same route: its start and drain touch only each link's count), and
    # a search drops routes without flows from a list it finds mostly such routes
    cdef vector[vector[int]] on_link
    cdef vector[int] link_live  # link -> the routes on it that carry flows
    cdef vector[int] listed_on  # route -> the lists of its links it is on
    cdef vector[vector[pair[int64_t, int]]] rflows  # route -> its flows (seq, id), in the order sent
    cdef SimSolved solved
    cdef int64_t kept
    cdef object dirty_sched
    cdef int64_t dirty_now
    cdef int64_t dirty_token
    cdef int64_t tokens
    cdef unordered_map[int64_t, vector[int]] dirty  # the keys of pending recomputes other than the open one
    cdef vector[int] open_keys  # the keys of the open one (`dirty_token`)
    cdef vector[int64_t] key_stamp
    cdef int64_t stamp
    # scratch space, kept between calls (no allocation per recompute)
    cdef vector[int] sig
    cdef vector[int] keys_buf
    cdef vector[int] stack
    cdef vector[int] found  # the routes of the component being searched, in the order met
    cdef vector[pair[int64_t, int]] heads  # the merge of their flows: (-seq, index in `found`), a max-heap
    cdef vector[size_t] cursor
    cdef vector[int] comp
    cdef vector[int] comp_route  # each flow's route, by its place in `comp`
    cdef vector[int] placed
    cdef vector[uint64_t] taken  # a bit per seq of `placed`: which hold a flow
    #: merge a component's routes without the heap where each route has one flow and they were found
    #: in the order sent, or else by placing their flows by seq where the seqs are dense (False: always
    #: through the heap of the lists' heads, the path both shorten; the property tests run both)
    cdef public bint dense_merge
    #: give the flows of a component whose routes share no link with one another each its route's own
    #: share (what the max-min fill gives them, where no two of those shares are within its tolerance),
    #: not through the fill of the whole (False: always the fill, the path it shortens; tests run both)
    cdef public bint alone_rates
    cdef public int64_t apart_solved  # components given their routes' own rates (`alone_rates`)
    #: while no link carries two routes and no route two flows, a component is the flows of the
    #: routes marked; and where every route marked has its links to itself (no other route with
    #: flows on one), it is those routes' flows (False: always searched through the links, the path
    #: both shorten; tests run both)
    cdef public bint apart_search
    # `_fill_large`'s scratch space, kept between calls (a component of thousands of flows allocated
    # and zeroed every one afresh, from the kernel where it is large)
    cdef vector[int] fl_links
    cdef vector[int] fl_entry
    cdef vector[int] fl_start
    cdef vector[int] fl_fill
    cdef vector[int] fl_flow
    cdef vector[double] fl_weight
    cdef vector[double] fl_remaining
    cdef vector[double] fl_freed
    cdef vector[char] fl_active
    cdef vector[int] fl_frozen
    cdef vector[int] fl_touched
    cdef vector[double] fl_rates
    cdef int64_t shared_links  # links that carry two routes with flows or more
    cdef int64_t crowded_routes  # routes that carry two flows or more
    cdef bint apart  # the component `_component` found last: routes alone on links of their own
    cdef int64_t met_links  # links its search met through routes
    cdef vector[double] route_alone  # route -> its rate alone (0: not known yet)
    cdef vector[double] route_shared  # route -> each flow's rate where `route_by` flows take it alone
    cdef vector[int] route_by
    cdef vector[double] alone_rate  # the last component's rates by flow, `alone_rates`' way
    cdef vector[double] distinct
    cdef vector[int] expanded  # a large component's routes as a multiset: each route its flows' times
    cdef vector[double] route_rate  # route -> its rate in the component solved last (valid for its routes)
    cdef vector[double] flow_rate  # the component's rates, by flow
    cdef vector[double] fresh  # the rates of the component solved last
    cdef vector[int] local_of  # link -> its index in the component being filled (valid where link_stamp is)
    cdef vector[int64_t] link_stamp
    cdef vector[int64_t] route_stamp  # route -> the search that met its links last
    cdef vector[char] route_repeats  # route -> 2 where it takes a link twice, 1 where not, 0 not known yet

    name = "fluid"

    def __init__(self, CoreScheduler sched, capacity, latency):
        super().__init__(sched, capacity, latency)
        self.cap = [float(c) for c in self.capacity]
        self.on_link.resize(len(self.capacity))
        self.link_live.resize(len(self.capacity), 0)
        self.key_stamp.resize(len(self.capacity), 0)
        self.link_stamp.resize(len(self.capacity), 0)
        self.local_of.resize(len(self.capacity), 0)
        self.dirty_sched = None
        self.dirty_token = -1
        self.dense_merge = True
        self.alone_rates = True
        self.apart_search = True

    cdef void _start(self, int mid) except *:
        cdef CoreScheduler s = self._sched
        cdef int64_t now = s.now
        cdef int r = self.msgs[mid].route
        if self._nkeys(r) == 0:
            s.push(now + <int64_t>self.msgs[mid].latency, 0, EV_ARRIVE, self, mid, 0, 0, None)
            return
        self.sent += 1
        cdef int fid
        cdef Flow blank
        blank.version = 0
        if self.free_ids.empty():
            fid = self.flows.size()
            self.flows.push_back(blank)
        else:
            fid = self.free_ids.back()
            self.free_ids.pop_back()
        cdef Flow* f = &self.flows[fid]
        # the version goes on from the slot's last flow: a stale drain event never matches a new flow
        f.seq = self.sent
        f.route = r
        f.msg = mid
        f.remaining = <double>self.msgs[mid].size
        f.rate = 0.0
        f.t_upd = now
        f.const_ = True
        f.live = True
        f.ev_sched = 0
        f.ev_slot = -1
        f.ev_key = -1
        cdef int j, k, live
        if <size_t>r >= self.rflows.size():
            self.rflows.resize(self.route_ptr.size() - 1)
            self.listed_on.resize(self.route_ptr.size() - 1, 0)
        cdef vector[pair[int64_t, int]]* mine = &self.rflows[r]
        if mine.empty():  # the route's links carry it from now on
            for j in range(self.route_ptr[r], self.route_ptr[r + 1]):
                k = self.route_keys[j]
                live = self.link_live[k] + 1
                self.link_live[k] = live
                if live == 2:
                    self.shared_links += 1
            if self.listed_on[r] != self.route_ptr[r + 1] - self.route_ptr[r]:
                self._list(r)
        sim_pair(mine[0], f.seq, fid)
        if mine.size() == 2:
            self.crowded_routes += 1
        self._mark(r, 0, now)

    cdef void _list(self, int r) noexcept:
        """Route r onto the lists of those of its links that dropped it (or never had it)."""
        cdef int j
        cdef size_t i
        cdef bint there
        cdef vector[int]* lst
        for j in range(self.route_ptr[r], self.route_ptr[r + 1]):
            lst = &self.on_link[self.route_keys[j]]
            there = False
            if self.listed_on[r]:
                for i in range(lst.size()):
                    if lst[0][i] == r:
                        there = True
                        break
            if not there:
                lst.push_back(r)
        self.listed_on[r] = self.route_ptr[r + 1] - self.route_ptr[r]

    cdef void _prune(self, int k) noexcept:
        """Link k's list without the routes that no longer carry flows."""
        cdef vector[int]* lst = &self.on_link[k]
        cdef size_t i, n = 0
        cdef int r
        for i in range(lst.size()):
            r = lst[0][i]
            if self.rflows[r].empty():
                self.listed_on[r] -= 1
            else:
                lst[0][n] = r
                n += 1
        lst.resize(n)

    cdef void _mark(self, int route, bint skip_empty, int64_t now) noexcept:
        """Links of a route to solve again at `now`, after every ordinary event of it (`skip_empty`:
        only the links that still carry flows): the route itself (as -1 - route) where it carries
        flows, as all its links do then."""
        cdef CoreScheduler s = self._sched
        if self.dirty_token < 0 or self.dirty_sched is not s or self.dirty_now != now:
            if self.dirty_token >= 0:  # still pending, in another queue or at another time
                self.dirty[self.dirty_token].swap(self.open_keys)
            self.open_keys.clear()
            self.tokens += 1
            self.dirty_token = self.tokens
            self.dirty_sched = s
            self.dirty_now = now
            s.push(now, 1, EV_RECOMPUTE, self, self.dirty_token, 0, 0, None)
        cdef vector[int]* keys = &self.open_keys
        if not skip_empty or not self.rflows[route].empty():  # every link of it carries it: the route
            keys.push_back(-route - 1)
            return
        cdef int j, k
        for j in range(self.route_ptr[route], self.route_ptr[route + 1]):
            k = self.route_keys[j]
            if skip_empty and self.link_live[k] == 0:
                continue
            keys.push_back(k)

    cdef void _drain(self, int64_t fid, int64_t version) noexcept:
        cdef Flow* f = &self.flows[fid]
        if not f.live or version != f.version:
            return
        f.version += 1
        cdef int r = f.route
        cdef int j, k
        cdef size_t i
        cdef vector[pair[int64_t, int]]* mine = &self.rflows[r]
        for i in range(mine.size()):  # the first mostly: flows of a route mostly drain in the order sent
            if mine[0][i].second == fid:
                mine.erase(mine.begin() + i)
                break
        if mine.size() == 1:
            self.crowded_routes -= 1
        cdef bint left = not mine.empty()
        cdef vector[int]* lst
        if not left:  # the route's last flow: its links no longer carry the route
            for j in range(self.route_ptr[r], self.route_ptr[r + 1]):
                k = self.route_keys[j]
                if self.link_live[k] == 2:
                    self.shared_links -= 1
                self.link_live[k] -= 1
                if self.link_live[k]:
                    left = True
            if left and self.listed_on[r]:  # links that others still use (and searches meet): off their lists
                for j in range(self.route_ptr[r], self.route_ptr[r + 1]):
                    lst = &self.on_link[self.route_keys[j]]
                    for i in range(lst.size()):
                        if lst[0][i] == r:
                            lst[0][i] = lst.back()
                            lst.pop_back()
                            break
                self.listed_on[r] = 0
        cdef CoreScheduler s = self._sched
        cdef int64_t now = s.now
        if left:
            self._mark(r, 1, now)
        cdef int mid = f.msg
        cdef Message* m = &self.msgs[mid]
        cdef int64_t t
        if f.const_:
            t = m.t_send + <int64_t>(m.latency + <double>m.size / f.rate)
        else:
            t = now + <int64_t>m.latency
        f.live = False
        self.free_ids.push_back(fid)
        s.push(t if t > now else now, 0, EV_ARRIVE, self, mid, 0, 0, None)

    cdef void _recompute(self, int64_t token) noexcept:
        cdef unordered_map[int64_t, vector[int]].iterator at
        self.keys_buf.clear()
        if token == self.dirty_token:
            self.dirty_token = -1
            self.keys_buf.swap(self.open_keys)
        else:
            at = self.dirty.find(token)
            if at != self.dirty.end():
                self.keys_buf.swap(deref(at).second)
                self.dirty.erase(at)
        self._component(self.keys_buf)
        cdef vector[int]* comp = &self.comp
        if comp.empty():
            return
        self.recomputes += 1
        cdef CoreScheduler s = self._sched
        cdef int64_t now = s.now
        cdef size_t i
        cdef Flow* f
        cdef const vector[double]* rates = NULL  # (they depend on routes only, not on what is left)
        if self.apart and self.alone_rates:
            rates = self._apart_rates()
            if rates != NULL:
                self.apart_solved += 1
        if rates == NULL:
            rates = self._rates(comp[0])
        cdef double r, x
        cdef int64_t wait, key
        for i in range(comp.size()):
            f = &self.flows[comp[0][i]]
            if f.t_upd != now:  # what is left now, at the rate it had
                f.remaining -= f.rate * <double>(now - f.t_upd)
                f.t_upd = now
            r = deref(rates)[i]
            if r <= 0.0:
                f.const_ = False
            if r != f.rate:
                if f.rate != 0.0:
                    f.const_ = False
                f.rate = r
                f.version += 1
                if r > 0.0:
                    # max(floor(x), 0), as Python's: for x > 0 floor is the truncating conversion
                    # itself (floor, without SSE4.1, is a chain of six more operations after the division)
                    x = f.remaining / r
                    wait = <int64_t>x if x > 0 else 0
                    key = s.update(f.ev_slot, f.ev_key, now + wait, 0, f.version) if f.ev_sched == s.serial else -1
                    if key < 0:
                        f.ev_slot = s.push(now + wait, 0, EV_DRAIN, self, comp[0][i], f.version, 0, None)
                        f.ev_sched = s.serial
                        f.ev_key = s.key_of(f.ev_slot)
                    else:
                        f.ev_key = key

    cdef void _component(self, vector[int]& keys) noexcept:
        """The flows connected to `keys` (links, and routes as `_mark` puts them) through shared
        links, in the order they were sent, into `comp` (their routes into `found`). Links hold
        routes, and each route its flows in the order sent, so the search meets each route once and
        the flows come out of a merge of sorted lists. Where the routes marked have their links to
        themselves, there is nothing to search (`_marked_alone`): a ring's steps mostly are so, even
        while other routes share links elsewhere."""
        if self.apart_search and self.shared_links == 0 and self.crowded_routes == 0 and self._marked_apart(keys):
            return
        if self.route_stamp.size() + 1 < self.route_ptr.size():
            self.route_stamp.resize(self.route_ptr.size() - 1, 0)
        if not (self.apart_search and self._marked_alone(keys)):
            self._search(keys)
        self.comp.clear()
        self.comp_route.clear()
        self._merge()

    cdef void _search(self, vector[int]& keys) noexcept:
        """`_component`'s search: the routes with flows reachable from `keys` through links, into
        `found` (and whether they may be apart, and the links met)."""
        self.stamp += 1
        cdef int64_t st = self.stamp
        cdef vector[int]* stack = &self.stack
        cdef vector[int]* found = &self.found
        stack.clear()
        found.clear()
        self.apart = True
        self.met_links = 0
        cdef size_t i
        cdef int k, r
        for i in range(keys.size()):
            k = keys[i]
            if k >= 0:
                self.apart = False  # a link itself: it may be met through no route of the component
                if self.key_stamp[k] != st:
                    self.key_stamp[k] = st
                    stack.push_back(k)
                continue
            r = -k - 1  # a route (`_mark`): its links, and itself where it still carries flows
            if self.route_stamp[r] == st:
                continue
            if not self.rflows[r].empty():
                self.route_stamp[r] = st
                found.push_back(r)
            else:
                self.apart = False
            self._links_of(r, st)
        while not stack.empty():
            k = stack.back()
            stack.pop_back()
            for i in range(self.on_link[k].size()):
                r = self.on_link[k][i]
                if self.route_stamp[r] == st or self.rflows[r].empty():
                    continue
                self.route_stamp[r] = st
                found.push_back(r)
                self._links_of(r, st)
            if self.on_link[k].size() > 2 * <size_t>self.link_live[k] + 8:
                self._prune(k)

    cdef bint _marked_alone(self, vector[int]& keys) noexcept:
        """`_search` where every key is a route with flows whose links carry no other route with
        flows (`apart_search`): the routes marked, with no search through the links' lists (False,
        and the search to do, where a link itself, a route without flows, a link another route
        with flows uses, or a link a route takes twice is met). While no link carries two routes
        with flows (`shared_links`, ResNet-50 DP 256 fluid: 91,177 of 91,394 components), no link of
        a route with flows does: then only the routes are looked at, not their links."""
        self.stamp += 1
        cdef int64_t st = self.stamp
        cdef vector[int]* found = &self.found
        found.clear()
        self.met_links = 0
        cdef size_t i
        cdef int k, r, j, lk
        cdef bint unshared = self.shared_links == 0
        for i in range(keys.size()):
            k = keys[i]
            if k >= 0:
                return False
            r = -k - 1
            if self.route_stamp[r] == st:
                continue
            if self.rflows[r].empty():
                return False
            self.route_stamp[r] = st
            if unshared:
                if self._repeats(r):
                    return False
            else:
                for j in range(self.route_ptr[r], self.route_ptr[r + 1]):
                    lk = self.route_keys[j]
                    if self.link_live[lk] != 1 or self.key_stamp[lk] == st:
                        return False
                    self.key_stamp[lk] = st
            self.met_links += self.route_ptr[r + 1] - self.route_ptr[r]
            found.push_back(r)
        self.apart = True
        return True

    cdef inline bint _repeats(self, int r) noexcept:
        """Whether route r takes a link twice (found once per route)."""
        if self.route_repeats.size() <= <size_t>r:
            self.route_repeats.resize(self.route_ptr.size() - 1, 0)
        cdef char known = self.route_repeats[r]
        cdef int j, i
        if known == 0:
            known = 1
            for j in range(self.route_ptr[r], self.route_ptr[r + 1]):
                for i in range(self.route_ptr[r], j):
                    if self.route_keys[i] == self.route_keys[j]:
                        known = 2
            self.route_repeats[r] = known
        return known == 2

    cdef void _merge(self) noexcept:
        """The flows of the routes `found`, merged in the order sent, into `comp` (their routes into
        `comp_route`); whether their routes are apart (`apart`): no link met twice."""
        cdef vector[int]* found = &self.found
        cdef size_t i
        cdef int r
        cdef vector[pair[int64_t, int]]* lst
        cdef int64_t entries = 0, last = -1
        cdef bint ordered = self.dense_merge
        for i in range(found.size()):  # each route one flow, in the order sent already?
            lst = &self.rflows[found[0][i]]
            if lst.size() != 1:
                ordered = False
            elif lst[0][0].first < last:
                ordered = False
            else:
                last = lst[0][0].first
            entries += self.route_ptr[found[0][i] + 1] - self.route_ptr[found[0][i]]
        # apart: each link met once per route, so no two routes share one and none repeats one
        self.apart = self.apart and entries == self.met_links
        if ordered:  # routes of one flow each, found in the order sent (a ring's step mostly): no merge
            for i in range(found.size()):
                r = found[0][i]
                self.comp.push_back(self.rflows[r][0].second)
                self.comp_route.push_back(r)
            return
        if found.size() == 1:
            r = found[0][0]
            lst = &self.rflows[r]
            for i in range(lst.size()):
                self.comp.push_back(lst[0][i].second)
                self.comp_route.push_back(r)
            return
        # the routes' lists merged by seq (unique), as `netmodels._by_seq` sorts: placed by seq where
        # the seqs are dense (flows started together), else through a heap of the lists' heads
        cdef int64_t lo = INT64_MAX, hi = -1, span
        cdef size_t n = 0
        for i in range(found.size()):
            lst = &self.rflows[found[0][i]]
            if not lst.empty():
                n += lst.size()
                lo = min(lo, lst.front().first)
                hi = max(hi, lst.back().first)
        if n == 0:
            return
        span = hi - lo + 1
        cdef size_t e
        self.cursor.assign(found.size(), 0)
        cdef size_t c
        cdef size_t w, at
        cdef uint64_t bits
        if self.dense_merge and span <= 64 * <int64_t>n + 256:
            # seq - lo -> the index of its route in `found`, where its bit in `taken` is set: the
            # seqs in order are the set bits word by word (a component of old and new flows spans
            # about 21 seqs per flow in ResNet-50 DP 256)
            if self.placed.size() < <size_t>span:
                self.placed.resize(span)
            self.taken.assign((span >> 6) + 1, 0)
            for i in range(found.size()):
                lst = &self.rflows[found[0][i]]
                for e in range(lst.size()):
                    at = <size_t>(lst[0][e].first - lo)
                    self.placed[at] = <int>i
                    self.taken[at >> 6] |= (<uint64_t>1) << (at & 63)
            for w in range(self.taken.size()):
                bits = self.taken[w]
                while bits:
                    at = (w << 6) | <size_t>sim_ctz(bits)
                    bits &= bits - 1
                    i = <size_t>self.placed[at]
                    r = found[0][i]
                    c = self.cursor[i]
                    self.cursor[i] = c + 1
                    self.comp.push_back(self.rflows[r][c].second)
                    self.comp_route.push_back(r)
            return
        cdef vector[pair[int64_t, int]]* heads = &self.heads
        heads.clear()
        for i in range(found.size()):
            lst = &self.rflows[found[0][i]]
            if not lst.empty():
                sim_pair(heads[0], -lst[0][0].first, <int>i)
        make_heap(heads.begin(), heads.end())
        while not heads.empty():
            pop_heap(heads.begin(), heads.end())
            i = <size_t>heads.back().second
            heads.pop_back()
            lst = &self.rflows[found[0][i]]
            c = self.cursor[i]
            self.comp.push_back(lst[0][c].second)
            self.comp_route.push_back(found[0][i])
            c += 1
            self.cursor[i] = c
            if c < lst.size():
                sim_pair(heads[0], -lst[0][c].first, <int>i)
                push_heap(heads.begin(), heads.end())

    cdef bint _marked_apart(self, vector[int]& keys) noexcept:
        """`_component` while no link carries two routes and no route two flows (`apart_search`):
        the flows of the routes marked, in the order sent, each alone on its links (False, and
        nothing found, where a link itself or a route without flows was marked: then the search)."""
        cdef vector[pair[int64_t, int]]* pairs = &self.heads
        pairs.clear()
        cdef size_t i
        cdef int k, r
        cdef bint ordered = True
        for i in range(keys.size()):
            k = keys[i]
            if k >= 0:
                return False
            r = -k - 1
            if self.rflows[r].empty():  # drained since it was marked: its links are searched
                return False
            if not pairs.empty() and pairs.back().first >= self.rflows[r][0].first:
                ordered = False
            sim_pair(pairs[0], self.rflows[r][0].first, r)
        if not ordered:
            sort(pairs.begin(), pairs.end())
        self.found.clear()
        self.comp.clear()
        self.comp_route.clear()
        for i in range(pairs.size()):
            if i and pairs[0][i].first == pairs[0][i - 1].first:  # a route marked twice
                continue
            r = pairs[0][i].second
            self.found.push_back(r)
            self.comp.push_back(self.rflows[r][0].second)
            self.comp_route.push_back(r)
        self.apart = True
        return True

    cdef inline void _links_of(self, int r, int64_t st) noexcept:
        """Route r's links not met yet in search `st`, onto the search's stack."""
        cdef int j, k
        for j in range(self.route_ptr[r], self.route_ptr[r + 1]):
            k = self.route_keys[j]
            if self.key_stamp[k] != st:
                self.key_stamp[k] = st
                self.stack.push_back(k)
                self.met_links += 1

    cdef const vector[double]* _apart_rates(self) noexcept:
        """The rates of a component of routes that share no link (`apart`): each of a route's k
        flows the smallest of its links' capacity over k times its multiplicity, the share the fill
        gives the link (its multiplicities summed over the route's flows: whole numbers, exact). The
        fill of the whole gives each flow the smallest share of the round that freezes it, and a
        round freezes every flow whose share is within 1e-12 of that smallest share: so each flow
        gets its route's share exactly where no two of the shares are that close (else NULL: the
        fill decides)."""
        cdef vector[int]* comp = &self.comp
        cdef size_t i, n = comp.size()
        cdef int r, j, k
        cdef double m
        if self.route_alone.size() + 1 < self.route_ptr.size():
            self.route_alone.resize(self.route_ptr.size() - 1, 0.0)
            self.route_shared.resize(self.route_ptr.size() - 1, 0.0)
            self.route_by.resize(self.route_ptr.size() - 1, 0)
        self.alone_rate.resize(n)
        self.distinct.clear()
        for i in range(n):
            r = self.comp_route[i]
            k = <int>self.rflows[r].size()
            m = self.route_alone[r] if k == 1 else self.route_shared[r] if self.route_by[r] == k else 0.0
            if m == 0.0:
                m = self._alone(r, k)
                if not (m > 0.0 and m < INFINITY):
                    return NULL
                if k == 1:
                    self.route_alone[r] = m
                else:
                    self.route_shared[r] = m
                    self.route_by[r] = k
            self.alone_rate[i] = m
            if self.distinct.empty() or self.distinct.back() != m:
                for j in range(<int>self.distinct.size()):
                    if self.distinct[j] == m:
                        break
                else:
                    if self.distinct.size() == 16:  # many rates: the fill
                        return NULL
                    self.distinct.push_back(m)
        sort(self.distinct.begin(), self.distinct.end())
        for i in range(1, self.distinct.size()):
            if self.distinct[i] <= self.distinct[i - 1] * (1 + 1e-12):
                return NULL
        return &self.alone_rate

    cdef const vector[double]* _rates(self, vector[int]& comp) noexcept:
        """The component's max-min rates: solved before for the same routes in the same order, or now
        (where they are kept: valid until the next call). A large component's rates depend on its
        routes as a multiset only (`_fill_large`), so it is kept by that: each route and its number
        of flows, by route."""
        if comp.size() > SMALL:
            return self._rates_large(comp)
        cdef vector[int]* sig = &self.sig
        sig.clear()
        cdef size_t i
        for i in range(comp.size()):
            sig.push_back(self.comp_route[i])
        cdef const vector[double]* found = self.solved.get(sig[0])
        if found != NULL:
            self.reused += 1
            return found
        if comp.size() == 1:
            self.fresh = self._single(sig[0][0])
        else:
            self.fresh = self._fill_small(sig[0])
        self._keep(sig[0], self.fresh)
        return &self.fresh

    cdef void _keep(self, vector[int]& sig, vector[double]& rates) noexcept:
        self.kept += sig.size()
        if self.kept > MEMO:
            self.solved.clear()
            self.kept = sig.size()
        self.solved.put(sig, rates)

    cdef const vector[double]* _rates_large(self, vector[int]& comp) noexcept:
        """`_rates` of more than `SMALL` flows (those `_component` found last): the rate of each
        route of the multiset solved before or now, then each flow its route's."""
        cdef vector[int]* sig = &self.sig
        cdef vector[int]* found = &self.found
        sort(found.begin(), found.end())
        sig.clear()
        sig.push_back(-1)  # not a sequence of routes (those are >= 0)
        cdef size_t i
        cdef int r, n
        for i in range(found.size()):
            r = found[0][i]
            n = self.rflows[r].size()
            if n:
                sig.push_back(r)
                sig.push_back(n)
        if self.route_rate.size() + 1 < self.route_ptr.size():
            self.route_rate.resize(self.route_ptr.size() - 1, 0.0)
        cdef const vector[double]* known = self.solved.get(sig[0])
        cdef const vector[double]* by_flow
        cdef size_t at
        if known != NULL:
            self.reused += 1
            for i in range(0, sig.size() // 2):
                self.route_rate[sig[0][1 + 2 * i]] = deref(known)[i]
        else:
            self.expanded.clear()
            for i in range(1, sig.size(), 2):
                for n in range(sig[0][i + 1]):
                    self.expanded.push_back(sig[0][i])
            by_flow = self._fill_large(self.expanded)
            self.fresh.clear()
            at = 0
            for i in range(1, sig.size(), 2):
                self.fresh.push_back(deref(by_flow)[at])
                self.route_rate[sig[0][i]] = deref(by_flow)[at]
                at += <size_t>sig[0][i + 1]
            self._keep(sig[0], self.fresh)
        self.flow_rate.resize(comp.size())
        for i in range(comp.size()):
            self.flow_rate[i] = self.route_rate[self.comp_route[i]]
        return &self.flow_rate

    cdef double _alone(self, int r, int64_t k=1) noexcept:
        """The rate of each of k flows of route r alone on its links: the smallest of its links'
        capacity over k times its multiplicity."""
        cdef double best = INFINITY
        cdef double x
        cdef int j
        for j in range(self.route_ptr[r], self.route_ptr[r + 1]):
            x = self.cap[self.route_keys[j]] / <double>(k * self.route_mult[j])
            if x < best:
                best = x
        return best

    cdef vector[double] _single(self, int r) noexcept:
        cdef vector[double] out
        out.push_back(self._alone(r))
        return out

    cdef int _local(self, int k, vector[int]& links) noexcept:
        """Link k's index among the component's links (`links`, in the order first met; this fill's
        stamp tells whether it has one yet)."""
        if self.link_stamp[k] != self.stamp:
            self.link_stamp[k] = self.stamp
            self.local_of[k] = links.size()
            links.push_back(k)
        return self.local_of[k]

    cdef vector[double] _fill_small(self, vector[int]& routes) noexcept:
        """`netmodels._fill_small` without weights: the same sums in the same order."""
        self.stamp += 1
        cdef vector[int] links  # in the order first met
        cdef vector[double] rem
        cdef vector[int64_t] weight
        cdef vector[int] count
        cdef vector[int] entry  # each route entry's link index
        cdef size_t i, n = routes.size()
        cdef int j, k, r, l
        for i in range(n):
            r = routes[i]
            for j in range(self.route_ptr[r], self.route_ptr[r + 1]):
                k = self.route_keys[j]
                l = self._local(k, links)
                if <size_t>l == rem.size():
                    rem.push_back(self.cap[k])
                    weight.push_back(0)
                    count.push_back(0)
                weight[l] += self.route_mult[j]
                count[l] += 1
        cdef vector[double] rates = vector[double](n, 0.0)
        cdef vector[char] active = vector[char](n, 1)
        cdef vector[char] bottleneck = vector[char](links.size(), 0)
        cdef size_t left = n, L = links.size()
        cdef double s, limit, x
        cdef bint hit
        while left:
            s = INFINITY
            for l in range(L):
                if count[l] > 0:
                    x = rem[l] / <double>weight[l]
                    if x < s:
                        s = x
            limit = s * (1 + 1e-12)
            for l in range(L):
                bottleneck[l] = count[l] > 0 and rem[l] / <double>weight[l] <= limit
            for i in range(n):
                if not active[i]:
                    continue
                r = routes[i]
                hit = False
                for j in range(self.route_ptr[r], self.route_ptr[r + 1]):
                    if bottleneck[self.local_of[self.route_keys[j]]]:
                        hit = True
                        break
                if hit:
                    active[i] = 2  # frozen this round
            for i in range(n):
                if active[i] != 2:
                    continue
                rates[i] = s
                r = routes[i]
                for j in range(self.route_ptr[r], self.route_ptr[r + 1]):
                    l = self.local_of[self.route_keys[j]]
                    rem[l] -= <double>self.route_mult[j] * s
                    weight[l] -= self.route_mult[j]
                    count[l] -= 1
                active[i] = 0
                left -= 1
        return rates

    cdef const vector[double]* _fill_large(self, vector[int]& routes) noexcept:
        """`netmodels._fill_numpy` without weights, the same operations on the same numbers: each
        round, a link's share is its remaining capacity over the multiplicities of its active flows,
        and the flows through the links of the smallest share (within 1e-12) are frozen at it, each
        link giving up the sum of its frozen flows' multiplicities times that share.

        Multiplicities are whole numbers, so their sums are exact in any order: kept per link from
        round to round (numpy sums them again each round, in entry order, to the same values), and
        the links in the order first met (numpy's are sorted; no value depends on the order).

        The rates are kept in `fl_rates` (valid until the next call)."""
        self.stamp += 1
        cdef size_t n = routes.size()
        cdef vector[int]* links = &self.fl_links
        cdef vector[int]* entry_link = &self.fl_entry
        links.clear()
        entry_link.clear()
        cdef size_t i, e, L
        cdef int j, r, l
        # each link's entries (its flows), grouped by link: counting sort of the entries
        for i in range(n):
            r = routes[i]
            for j in range(self.route_ptr[r], self.route_ptr[r + 1]):
                entry_link.push_back(self._local(self.route_keys[j], links[0]))
        L = links.size()
        cdef size_t E = entry_link.size()
        cdef vector[int]* start = &self.fl_start
        start.assign(L + 1, 0)
        for e in range(E):
            start[0][entry_link[0][e] + 1] += 1
        for e in range(L):
            start[0][e + 1] += start[0][e]
        cdef vector[int]* fill = &self.fl_fill
        fill.assign(start.begin(), start.end() - 1)
        cdef vector[int]* link_flow = &self.fl_flow
        cdef vector[double]* weight = &self.fl_weight
        cdef vector[double]* remaining = &self.fl_remaining
        link_flow.resize(E)
        weight.assign(L, 0.0)
        remaining.resize(L)
        e = 0
        for i in range(n):
            r = routes[i]
            for j in range(self.route_ptr[r], self.route_ptr[r + 1]):
                l = entry_link[0][e]
                link_flow[0][fill[0][l]] = i
                fill[0][l] += 1
                weight[0][l] += <double>self.route_mult[j]
                e += 1
        for l in range(L):
            remaining[0][l] = self.cap[links[0][l]]
        cdef vector[double]* rates = &self.fl_rates
        rates.assign(n, 0.0)
        cdef vector[char]* active = &self.fl_active
        active.assign(n, 1)
        cdef vector[double]* freed = &self.fl_freed
        freed.assign(L, 0.0)
        cdef vector[int]* frozen = &self.fl_frozen
        cdef vector[int]* touched = &self.fl_touched
        # the rounds through raw pointers (a store through `active`, a char, may alias anything)
        cdef double* W = weight.data()
        cdef double* R = remaining.data()
        cdef double* F = freed.data()
        cdef double* out = rates.data()
        cdef char* act = active.data()
        cdef int* lo = start.data()
        cdef int* lf = link_flow.data()
        cdef size_t left = n
        cdef double s, limit, share
        cdef int f, m
        while left:
            frozen.clear()
            s = INFINITY
            for l in range(L):
                if W[l] > 0:
                    share = R[l] / W[l]
                    if share < s:
                        s = share
            limit = s * (1 + 1e-12)
            for l in range(L):
                if W[l] > 0 and R[l] / W[l] <= limit:
                    for m in range(lo[l], lo[l + 1]):
                        f = lf[m]
                        if act[f] == 1:
                            act[f] = 2
                            frozen.push_back(f)
            touched.clear()
            for f in frozen[0]:
                out[f] = s
                act[f] = 0
                left -= 1
                r = routes[f]
                for j in range(self.route_ptr[r], self.route_ptr[r + 1]):
                    l = self.local_of[self.route_keys[j]]
                    if F[l] == 0.0:
                        touched.push_back(l)
                    F[l] += <double>self.route_mult[j]
            for l in touched[0]:
                R[l] = R[l] - F[l] * s
                W[l] -= F[l]
                F[l] = 0.0
        return rates


# -- ASTRA-SIM's system layer ---------------------------------------------------------------------


cdef class CorePhase:
    """One `system.PhaseProgram` in C++ vectors."""

    cdef int queue
    cdef int64_t delay
    cdef int steps
    cdef int period  # steps stored
    cdef bint gated
    cdef int offset
    cdef bint xor
    cdef vector[int64_t] ptr
    cdef vector[int64_t] dst
    cdef vector[int64_t] nbytes
    cdef vector[int64_t] need  # stored steps x simulated ranks
    cdef vector[int64_t] proc

    def __init__(self, ph):
        self.queue = ph.queue
        self.delay = ph.delay_ns
        self.steps = ph.steps
        self.period = ph.stored
        self.gated = ph.gated
        self.offset = ph.step_offset
        self.xor = ph.symmetry == "xor"
        self.ptr = ph.out_ptr.tolist()
        self.dst = ph.out_dst.tolist()
        self.nbytes = ph.out_bytes.tolist()
        self.need = ph.in_count.reshape(-1).tolist()
        self.proc = list(ph.proc_ns)


cdef class CorePlan:
    """A `system.CollectivePlan` in C++ vectors (built once per plan: `core_plan`)."""

    cdef list progs  # [even chunks' phases, odd chunks' phases], each a list of CorePhase
    cdef int n
    cdef int chunks
    cdef int active
    cdef int queues
    cdef int nphases
    cdef int max_steps
    cdef bint lane
    cdef vector[int64_t] members
    cdef vector[int] lut  # member -> index

    def __init__(self, plan):
        even = [CorePhase(ph) for ph in plan.phases]
        odd = [CorePhase(ph) for ph in plan.odd_phases] if plan.odd_phases is not None else even
        self.progs = [even, odd]
        self.n = plan.sim_ranks
        self.chunks = plan.chunks
        self.active = plan.active
        self.queues = max((ph.queue for ph in plan.phases), default=0) + 1
        self.nphases = len(plan.phases)
        self.max_steps = max([ph.steps for ph in plan.phases] + [ph.steps for ph in (plan.odd_phases or [])] + [1])
        self.lane = plan.lane
        self.members = list(plan.members)
        top = max(plan.members) if plan.members else 0
        self.lut = vector[int](top + 1, -1)
        cdef int k
        for k in range(len(plan.members)):
            self.lut[plan.members[k]] = k


def core_plan(plan):
    """The plan's C++ form, built once and kept on the plan."""
    found = getattr(plan, "_core", None)
    if found is None:
        found = CorePlan(plan)
        plan._core = found
    return found


cdef extern from *:
    """
    #include <cstdio>
    #include <cstdint>
    // zlib's crc32 (the reflected polynomial 0xEDB88320) of "src,dst,flow" in decimal, which
    // `Network.pick` hashes in Python
    static uint32_t sim_crc_table[256];
    static void sim_crc_init() {
        for (uint32_t n = 0; n < 256; ++n) {
            uint32_t c = n;
            for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            sim_crc_table[n] = c;
        }
    }
    static int64_t sim_pick(int64_t src, int64_t dst, int64_t flow, int64_t n) {
        char buf[80];
        int len = std::snprintf(buf, sizeof buf, "%lld,%lld,%lld", (long long)src, (long long)dst, (long long)flow);
        uint32_t c = 0xFFFFFFFFu;
        for (int i = 0; i < len; ++i) c = sim_crc_table[(c ^ (unsigned char)buf[i]) & 0xFF] ^ (c >> 8);
        return (int64_t)((c ^ 0xFFFFFFFFu) % (uint32_t)n);
    }
    """
    void sim_crc_init()
    int64_t sim_pick(int64_t src, int64_t dst, int64_t flow, int64_t n)


sim_crc_init()


cdef class PathCounts:
    """How many equal-cost paths each (source, destination) pair has (`count(src, dst)`, asked once
    per pair): what lets a compiled run keep its routes by the path ECMP picks for a flow, not by
    the flow, so that a collective finds the routes earlier ones found (ECMP per flow gives every
    collective flows of its own)."""

    cdef unordered_map[int64_t, int64_t] n
    cdef object count

    def __init__(self, count):
        self.count = count

    cdef int64_t of(self, int64_t src, int64_t dst) except -1:
        cdef int64_t key = (src << 32) | dst
        cdef unordered_map[int64_t, int64_t].iterator at = self.n.find(key)
        if at != self.n.end():
            return deref(at).second
        cdef int64_t v = int(self.count(src, dst))
        if v <= 0:
            raise ValueError(f"PathCounts: no path from {src} to {dst}")
        self.n[key] = v
        return v

    def pick(self, int64_t src, int64_t dst, int64_t flow):
        """The path `Network.pick` gives a flow of the pair (its number among the pair's paths)."""
        cdef int64_t n = self.of(src, dst)
        return sim_pick(src, dst, flow, n) if n > 1 else 0


cdef class RouteEntry:
    cdef tuple keys
    cdef object mult
    cdef double latency
    cdef int64_t alone
    cdef int64_t model  # the serial of the model whose route number `rid` is (0: none; not the
    # model itself, which the routes kept for the whole run would keep alive with its messages)
    cdef int rid


cdef struct RouteHit:
    int64_t size
    int64_t flow  # the flow, or the path ECMP picks for it (`_route`)
    PyObject* entry  # a RouteEntry the run's `held` list keeps


cdef class CoreCollectiveRun(OnQueue):
    """`system.CollectiveRun` on a core model: one collective executed rank by rank.

    `route(src, dst, size, flow)` gives a message's (keys, multiplicities, latency, uncontended
    ns), remembered in `routes` (a dict kept by the caller for the same route function; by flow
    only when `per_flow`: routes that depend on it);
    `on_rank_done(rank, t)` when a member has finished every chunk; `on_batch(t_send, t_arrive,
    src, dst, bytes, chunk, phase, step)` receives the messages that arrived, as int64 columns,
    every `BATCH` messages and when `flush()` is called; or, where only counts are kept,
    `on_count(messages, bytes, ranks, bytes sent by each)` in its place (only the ranks that sent:
    a collective of a few ranks costs nothing per rank of the network).

    `tell(nodes, ids, members)` hands a member's end to the compiled walk itself (`CoreNodes`): each
    member of `members` but the last to finish is done there, its span recorded from its issue, as
    `on_rank_done` would have had it done (no Python call per member); `ids` (rank -> node id) may be
    filled as members join, up to their end."""

    cdef CorePlan cp
    cdef CoreNet net
    cdef object route
    cdef dict routes
    cdef object on_rank_done
    cdef object on_batch
    cdef object on_count
    cdef int64_t counted
    cdef int64_t counted_bytes
    cdef vector[double] sent_by  # bytes sent by each member (whole numbers: exact in any order)
    cdef vector[int] senders  # the members that sent since the last flush, in the order they first did
    cdef vector[char] sending     # whether a member is in `senders`
    cdef int64_t flow
    cdef bint per_flow
    cdef PathCounts paths  # where routes depend on the flow only through the path ECMP picks
    cdef int n
    cdef public int done
    cdef vector[int] running    # n x queues
    cdef vector[deque[pair[int, int]]] waiting  # n x queues: (chunk, phase)
    cdef vector[int] phase      # n x chunks
    cdef vector[int] step
    cdef vector[char] sent
    cdef unordered_map[int64_t, int64_t] arrived  # messages arrived for a step not its chunk's current one
    cdef vector[int64_t] cur  # n x chunks: messages arrived for the chunk's current (phase, step)
    cdef vector[int] left
    cdef unordered_map[int64_t, int64_t] free
    cdef unordered_map[int64_t, vector[int64_t]] queued
    cdef vector[vector[int64_t]] rec
    cdef unordered_map[int64_t, vector[RouteHit]] hits  # (src << 32 | dst) -> routes by (size, flow)
    cdef list held
    cdef public int64_t recorded
    # each (chunk, phase, entry)'s route number, latency and time alone, found once (small plans)
    cdef vector[int64_t] rc_base  # chunk x phase -> its first entry's place; empty: no cache
    cdef vector[int] rc_rid
    cdef vector[double] rc_lat
    cdef vector[int64_t] rc_alone
    cdef vector[char] rc_known
    # members whose end the walk is told of directly (`tell`)
    cdef CoreNodes nodes
    cdef dict node_ids
    cdef vector[char] told

    def __init__(self, plan, CoreScheduler sched, CoreNet net, route, on_rank_done, on_batch=None, *,
                 on_count=None,
                 int64_t flow=0, dict routes=None, bint per_flow=True, PathCounts paths=None):
        self.cp = core_plan(plan)
        self._sched = sched
        self.net = net
        self.route = route
        self.routes = {} if routes is None else routes
        self.on_rank_done = on_rank_done
        self.on_batch = on_batch
        self.on_count = on_count
        self.flow = flow
        self.per_flow = per_flow
        self.paths = paths
        cdef CorePlan cp = self.cp
        self.n = cp.n
        if on_count is not None:  # by member (a message's `i`, its sender's place), not by rank of the network
            self.sent_by.resize(cp.n, 0.0)
            self.sending.resize(cp.n, 0)
        self.running.resize(cp.n * cp.queues, 0)
        self.waiting.resize(cp.n * cp.queues)
        self.phase.resize(cp.n * cp.chunks, 0)
        self.step.resize(cp.n * cp.chunks, 0)
        self.sent.resize(cp.n * cp.chunks, 0)
        self.left.resize(cp.n, cp.chunks)
        self.cur.resize(cp.n * cp.chunks, 0)
        self.rec.resize(8)
        self.held = []
        cdef int64_t total = 0
        cdef int c, p
        for c in range(cp.chunks):
            for p in range(cp.nphases):
                total += self._ph(c, p).dst.size()
        if total <= ROUTE_CACHE:
            for c in range(cp.chunks):
                for p in range(cp.nphases):
                    self.rc_base.push_back(self.rc_rid.size())
                    self.rc_rid.resize(self.rc_rid.size() + self._ph(c, p).dst.size(), -1)
            self.rc_lat.resize(total, 0.0)
            self.rc_alone.resize(total, 0)
            self.rc_known.resize(total, 0)

    def start(self):
        """Start every simulated rank now."""
        cdef int i
        for i in range(self.n):
            self.start_rank(i)

    def start_rank(self, int i):
        """Start simulated rank i now."""
        if self.cp.nphases == 0:
            self._rank_done(i)
            return
        cdef int c
        for c in range(self.cp.chunks):
            self._enqueue(i, c, 0)

    def index(self, rank):
        """The simulated-rank index of a member."""
        return 0 if self.cp.lane else self.cp.lut[rank]

    def tell(self, CoreNodes nodes, dict ids, members):
        """Tell `nodes` of the end of each rank of `members` directly (node ids from `ids`) where it
        is not the last member to finish and the run is on the walk's queue; `on_rank_done` of the others."""
        self.nodes = nodes
        self.node_ids = ids
        self.told.assign(self.n, 0)
        cdef int i
        for i in range(self.n):
            if self.cp.members[i] in members:
                self.told[i] = 1

    cdef inline CorePhase _ph(self, int c, int p):
        return <CorePhase>(<list>self.cp.progs[c & 1])[p]

    cdef inline int64_t _key(self, int i, int c, int p, int st) noexcept:
        return ((<int64_t>i * self.cp.chunks + c) * self.cp.nphases + p) * self.cp.max_steps + st

    cdef void _enqueue(self, int i, int c, int p) except *:
        cdef int q = self._ph(c, p).queue
        cdef int slot = i * self.cp.queues + q
        if self.running[slot] < self.cp.active:
            self.running[slot] += 1
            self._begin(i, c, p)
        else:
            self.waiting[slot].push_back(pair[int, int](c, p))

    cdef void _go(self, int ic, int i, int c, int p, int st) noexcept:
        """Chunk ic of rank index i moves to step st of phase p: the messages already arrived for it
        become its current count."""
        if self.phase[ic] == p and self.step[ic] == st:
            return
        self.phase[ic] = p
        self.step[ic] = st
        self.cur[ic] = 0
        cdef unordered_map[int64_t, int64_t].iterator it
        if not self.arrived.empty():
            it = self.arrived.find(self._key(i, c, p, st))
            if it != self.arrived.end():
                self.cur[ic] = deref(it).second
                self.arrived.erase(it)

    cdef void _begin(self, int i, int c, int p) except *:
        cdef int ic = i * self.cp.chunks + c
        self._go(ic, i, c, p, 0)
        self.sent[ic] = 0
        cdef CorePhase ph = self._ph(c, p)
        if ph.ptr[i] == ph.ptr[i + 1]:
            self._send(i, c)  # nothing to send first (a tree's inner node): it waits for its children
            return
        self._sched.push(self._sched.now + ph.delay, 0, EV_SEND, self, i, c, 0, None)

    cdef RouteEntry _route(self, int64_t src, int64_t dst, int64_t size, int64_t flow):
        """The route of a message: from this run's own table, else the caller's (`routes`), else `route`.
        Both tables keep it by flow where routes depend on it (`per_flow`), by the path ECMP picks
        for the flow where `paths` is given (as -1 - its number: never a flow), else by neither."""
        cdef int64_t by = flow
        cdef int64_t npaths
        if not self.per_flow:
            flow = by = 0
        elif self.paths is not None:
            npaths = self.paths.of(src, dst)
            by = -1 - (sim_pick(src, dst, flow, npaths) if npaths > 1 else 0)
        cdef vector[RouteHit]* hits = &self.hits[(src << 32) | dst]
        cdef size_t h
        cdef RouteEntry e
        for h in range(hits.size()):
            if hits[0][h].size == size and hits[0][h].flow == by:
                e = <RouteEntry>hits[0][h].entry
                if e.model != self.net.serial:
                    e.model = self.net.serial
                    e.rid = self.net.route_id(e.keys, e.mult) if e.keys else -1
                return e
        key = (src, dst, size, by)
        e = self.routes.get(key)
        if e is None:
            keys, mult, latency, alone = self.route(src, dst, size, flow)
            e = RouteEntry()
            e.keys = tuple(keys)
            e.mult = mult
            e.latency = latency
            e.alone = alone
            e.model = 0
            e.rid = -1
            self.routes[key] = e
        if e.model != self.net.serial:
            e.model = self.net.serial
            e.rid = self.net.route_id(e.keys, e.mult) if e.keys else -1
        self.held.append(e)  # the table's reference
        cdef RouteHit hit
        hit.size = size
        hit.flow = by
        hit.entry = <PyObject*>e
        hits = &self.hits[(src << 32) | dst]
        hits.push_back(hit)
        return e

    cdef void _send(self, int i, int c) except *:
        cdef int ic = i * self.cp.chunks + c
        cdef int p = self.phase[ic]
        cdef int st = self.step[ic]
        cdef CorePhase ph = self._ph(c, p)
        cdef int64_t src = self.cp.members[i]
        cdef int64_t k = (st % ph.period) * self.n + i
        cdef int64_t j, at
        cdef RouteEntry e
        if self.rc_base.empty():
            for j in range(ph.ptr[k], ph.ptr[k + 1]):
                e = self._route(src, ph.dst[j], ph.nbytes[j], self.flow + c)
                self.net._send_native(self, src, ph.dst[j], ph.nbytes[j], e.rid, e.latency, e.alone, i, c, p, st)
        else:
            for j in range(ph.ptr[k], ph.ptr[k + 1]):
                at = self.rc_base[c * self.cp.nphases + p] + j
                if not self.rc_known[at]:
                    e = self._route(src, ph.dst[j], ph.nbytes[j], self.flow + c)
                    self.rc_rid[at] = e.rid
                    self.rc_lat[at] = e.latency
                    self.rc_alone[at] = e.alone
                    self.rc_known[at] = 1
                self.net._send_native(self, src, ph.dst[j], ph.nbytes[j], self.rc_rid[at], self.rc_lat[at],
                                      self.rc_alone[at], i, c, p, st)
        self.sent[ic] = 1
        if st == 0 and ph.gated:
            self._gate(i, c, p)  # its step-0 messages may all have arrived (and been reduced) already
            return
        self._check(i, c)

    cdef void _arrive(self, Message& m) except *:
        cdef int i = m.i
        cdef int c = m.c
        cdef int p = m.p
        cdef int st = m.st
        if not self.cp.lane:
            i = self.cp.lut[m.dst]
        cdef int ic = i * self.cp.chunks + c
        if self.phase[ic] == p and self.step[ic] == st:
            self.cur[ic] += 1
        else:
            self.arrived[self._key(i, c, p, st)] += 1
        self._record(m)
        cdef CorePhase ph = self._ph(c, p)
        cdef CoreScheduler s
        if ph.gated and st == 0:
            s = self._sched
            s.push(s.now + ph.delay + ph.proc[0], 0, EV_GENERAL, self, i, c, p, None)
            return
        if self.phase[ic] == p and self.step[ic] == st and self.sent[ic]:
            self._check(i, c)

    cdef void _record(self, Message& m) except *:
        if self.on_count is not None:
            self.counted += 1
            self.counted_bytes += m.size
            if not self.sending[m.i]:  # (`_send` gives a message its sender's place)
                self.sending[m.i] = 1
                self.senders.push_back(m.i)
            self.sent_by[m.i] += <double>m.size
            self.recorded += 1
            if self.counted >= BATCH:
                self.flush()
            return
        if self.on_batch is None:
            return
        self.rec[0].push_back(m.t_send)
        self.rec[1].push_back(m.t_arrive)
        self.rec[2].push_back(m.src)
        self.rec[3].push_back(m.dst)
        self.rec[4].push_back(m.size)
        self.rec[5].push_back(m.c)
        self.rec[6].push_back(m.p)
        self.rec[7].push_back(m.st)
        self.recorded += 1
        if self.rec[0].size() >= BATCH:
            self.flush()

    def flush(self):
        """Hand the recorded messages on (`on_batch`), or their counts (`on_count`)."""
        cdef size_t r
        cdef int i
        cdef int64_t[::1] who_v
        cdef double[::1] sent_v
        if self.on_count is not None:
            if self.counted:
                who = np.empty(self.senders.size(), dtype=np.int64)
                sent = np.empty(self.senders.size(), dtype=np.float64)
                who_v = who
                sent_v = sent
                for r in range(self.senders.size()):
                    i = self.senders[r]
                    who_v[r] = self.cp.members[i]
                    sent_v[r] = self.sent_by[i]
                    self.sent_by[i] = 0.0
                    self.sending[i] = 0
                self.senders.clear()
                messages, nbytes = self.counted, self.counted_bytes
                self.counted = self.counted_bytes = 0
                self.on_count(messages, nbytes, who, sent)
            return
        if self.on_batch is None or self.rec[0].empty():
            return
        cols = []
        cdef size_t n = self.rec[0].size()
        cdef int64_t[::1] view
        cdef int k
        for k in range(8):
            a = np.empty(n, dtype=np.int64)
            view = a
            memcpy(&view[0], self.rec[k].data(), n * sizeof(int64_t))
            self.rec[k].clear()
            cols.append(a)
        self.on_batch(*cols)

    cdef void _general(self, int i, int c, int p) except *:
        self.free[(<int64_t>i * self.cp.chunks + c) * self.cp.nphases + p] += 1
        self._gate(i, c, p)

    cdef void _gate(self, int i, int c, int p) except *:
        cdef int ic = i * self.cp.chunks + c
        if self.phase[ic] != p or (not self.sent[ic] and self.step[ic] == 0):
            return
        cdef CorePhase ph = self._ph(c, p)
        cdef int64_t key0, k, j, fkey = (<int64_t>i * self.cp.chunks + c) * self.cp.nphases + p
        cdef vector[int64_t]* q
        if self.step[ic] == 0:
            if self.cur[ic] < ph.need[i]:  # the current step's count (phase p, step 0)
                return
            self.cur[ic] = 0
            k = (1 % ph.period) * self.n + i
            q = &self.queued[ic]
            q.clear()
            for j in range(ph.ptr[k], ph.ptr[k + 1]):
                q.push_back(j)
            self._go(ic, i, c, p, 1)
            self.sent[ic] = 0
        if self.queued.find(ic) == self.queued.end() or self.queued[ic].empty() or self.step[ic] != 1:
            return
        q = &self.queued[ic]
        cdef int64_t release = self.free[fkey]
        if <int64_t>q.size() < release:
            release = q.size()
        self.free[fkey] -= release
        cdef int64_t src = self.cp.members[i]
        cdef RouteEntry e
        cdef vector[int64_t] go
        for j in range(release):
            go.push_back(q[0][j])
        q.erase(q.begin(), q.begin() + release)
        for j in go:
            e = self._route(src, ph.dst[j], ph.nbytes[j], self.flow + c)
            self.net._send_native(self, src, ph.dst[j], ph.nbytes[j], e.rid, e.latency, e.alone, i, c, p, 1)
        q = &self.queued[ic]
        if q.empty():
            self.queued.erase(ic)
            self.free.erase(fkey)
            self.sent[ic] = 1
            self._check(i, c)

    cdef void _check(self, int i, int c) except *:
        cdef int ic = i * self.cp.chunks + c
        cdef int p = self.phase[ic]
        cdef int st = self.step[ic]
        cdef CorePhase ph = self._ph(c, p)
        if ph.gated and st == 0:
            return  # step 1 goes out as the step-0 messages are reduced (`_general`)
        cdef int per = ph.period
        cdef int n = self.n
        cdef int64_t need = ph.need[(st % per) * n + i]
        if self.cur[ic] < need:
            return
        self.cur[ic] = 0
        cdef CoreScheduler s = self._sched
        cdef int64_t wait = ph.proc[st] + ph.delay if need else 0
        cdef int nxt = st + 1
        while nxt < ph.steps and not ph.need[(nxt % per) * n + i] and \
                ph.ptr[(nxt % per) * n + i] == ph.ptr[(nxt % per) * n + i + 1]:
            nxt += 1
        self.sent[ic] = 0
        if nxt < ph.steps:
            self._go(ic, i, c, p, nxt)
            s.push(s.now + wait, 0, EV_SEND, self, i, c, 0, None)
        elif wait:
            s.push(s.now + wait, 0, EV_LEAVE, self, i, c, 0, None)
        else:
            self._leave(i, c)

    cdef void _leave(self, int i, int c) except *:
        cdef int ic = i * self.cp.chunks + c
        cdef int p = self.phase[ic]
        cdef int q = self._ph(c, p).queue
        cdef int slot = i * self.cp.queues + q
        self.running[slot] -= 1
        cdef pair[int, int] nxt
        if not self.waiting[slot].empty():
            self.running[slot] += 1
            nxt = self.waiting[slot].front()
            self.waiting[slot].pop_front()
            self._begin(i, nxt.first, nxt.second)
        if p + 1 < self.cp.nphases:
            self._enqueue(i, c, p + 1)
            return
        self.left[i] -= 1
        if self.left[i] == 0:
            self._rank_done(i)

    cdef void _rank_done(self, int i) except *:
        self.done += 1
        cdef int64_t rank = self.cp.members[i]
        if self.nodes is not None and self.done < self.n and self.told[i] and self.nodes._sched is self._sched:
            self.nodes._told(<int>rank, self.node_ids[rank])
            return
        self.on_rank_done(rank, self._sched.now)


# -- ASTRA-SIM's workload layer -------------------------------------------------------------------


cdef void _fill(vector[int64_t]& out, const int64_t[::1] src) noexcept:
    """`out` becomes a copy of `src`."""
    out.resize(src.shape[0])
    if src.shape[0]:
        memcpy(out.data(), &src[0], src.shape[0] * sizeof(int64_t))


cdef object _array(vector[int64_t]& src):
    """A numpy copy of `src`."""
    a = np.empty(src.size(), dtype=np.int64)
    cdef int64_t[::1] view
    if src.size():
        view = a
        memcpy(&view[0], src.data(), src.size() * sizeof(int64_t))
    return a


cdef enum NodeCode:
    N_CPU = 0    # a CPU node (`is_cpu_op`), whatever its type: computes on the CPU
    N_COMP = 1   # a compute node
    N_COLL = 2   # a collective
    N_SEND = 3
    N_RECV = 4
    N_OTHER = 5  # completes when issued


cdef extern from *:
    """
    // a collective instance some members have issued, gathered by the walk (`CoreNodes.gather`)
    struct SimGather {
        std::vector<int64_t> members;  // (rank, node index) pairs in issue order, flat
        int64_t count = 0;             // members issued
        int64_t tag = 0;               // the first member's node's tag (`CoreNodes.gather`)
        bool handed = false;           // handed to Python before every member issued (staggered)
    };
    """
    cdef cppclass SimGather:
        vector[int64_t] members
        int64_t count
        int64_t tag
        bint handed


cdef class CoreNodes:
    """`engine.Engine`'s walk of each rank's graph: dependencies, the ready nodes in ascending id
    order, one compute, one CPU and one communication node in flight per rank, compute nodes'
    times, and the spans of every node done, in C++. Communication nodes are issued through
    `issue_comm(rank, node_id, code)` (Python: the collectives, sends and receives), which tell
    `on_done(rank, node_id)` when they are done. Every event goes on the queue where the Python
    engine puts it, so the order of simultaneous events is the same.

    Ranks whose graphs are alike share one table (`tables.rank_tables`): rank r's nodes in
    ascending id are `tbase[t]`..`tbase[t + 1]` of the shared tables, t = `table_of[r]` (`ids`,
    `code` (`NodeCode`), `zero` (a compute node of no time and no ops: done when issued), `dur_ns`,
    `pending` (dependencies), children as `child_ptr`/`child` (indices within the rank)), and its
    state is `base[r]`..`base[r + 1]` of the per-rank arrays (dependencies left, issue times,
    gathered keys). Memory grows with the distinct graphs' nodes, and with every rank's by 16 bytes
    a node (and 24 for its span once done).

    `gather` (optional) gathers the members of collectives as `Engine.issue_collective` does, so
    that Python is called once per collective, not once per member: a node of key v >= 0 (group
    number g = v >> 3, a tag v & 7 for Python) is the k-th that its rank issues on g, and meets the
    k-th of the group's other members. When the last of the group's members issues it in the
    instant the first did, Python gets them all (`gathered(g, k, tag, ranks, node_ids, issued)`,
    the first member's tag); when that instant is over first (an event after every ordinary event
    of it, where Python queues its own check), it gets those that have (`staggered(...)`, the same
    arguments), and then each later one alone (`join(rank, node_id, g, k)`)."""

    cdef CoreScheduler _sched
    cdef object issue_comm
    cdef vector[int64_t] base          # per rank: its first place in the per-rank state
    cdef vector[int64_t] sbase         # per rank: its first place in the shared tables
    cdef vector[int64_t] ids           # shared tables: per place of a distinct table
    cdef vector[char] code
    cdef vector[char] zero
    cdef vector[int64_t] dur
    cdef vector[int64_t] child_ptr
    cdef vector[int64_t] child
    cdef vector[int32_t] pending       # per-rank state: per node of every rank
    cdef vector[int64_t] issued_at
    cdef vector[vector[int64_t]] ready  # per rank, a min-heap of node indices
    cdef vector[char] comp_busy
    cdef vector[char] comm_busy
    cdef vector[char] cpu_busy
    cdef vector[int64_t] left_
    cdef vector[int64_t] finish_
    cdef vector[int64_t] compute_
    cdef public int64_t nodes_done
    cdef public int64_t told  # collective nodes done as their runs told (`CoreCollectiveRun.tell`)
    cdef vector[int32_t] col_rank  # rank and node index (within the rank) of every node done, in completion order
    cdef vector[int32_t] col_node
    cdef vector[int64_t] cols[2]  # start and end of every node done
    cdef vector[vector[int64_t]] comm_  # per rank, the (start, end) pairs of `comm_done_at`'s nodes, flat
    cdef vector[int32_t] group_         # per node: the key of a gathered collective (group << 3 | tag), else -1
    cdef vector[int64_t] gsize          # per group number: its members
    cdef unordered_map[int64_t, int64_t] seen_  # group number x ranks + rank -> instances it issued
    cdef unordered_map[int64_t, SimGather] gathering  # (group number << 32) | instance
    cdef object gathered_fn, staggered_fn, join_fn

    def __init__(self, CoreScheduler sched, issue_comm, const int64_t[::1] base, const int64_t[::1] table_of,
                 const int64_t[::1] tbase, const int64_t[::1] ids, const signed char[::1] code,
                 const signed char[::1] zero, const int64_t[::1] dur_ns, const int64_t[::1] pending,
                 const int64_t[::1] child_ptr, const int64_t[::1] child):
        self._sched = sched
        self.issue_comm = issue_comm
        _fill(self.base, base)
        _fill(self.ids, ids)
        _fill(self.dur, dur_ns)
        _fill(self.child_ptr, child_ptr)
        _fill(self.child, child)
        cdef Py_ssize_t k
        self.code.resize(code.shape[0])
        self.zero.resize(zero.shape[0])
        for k in range(code.shape[0]):
            self.code[k] = <char>code[k]
            self.zero[k] = <char>zero[k]
        cdef size_t ranks = self.base.size() - 1
        if <size_t>table_of.shape[0] != ranks:
            raise ValueError("CoreNodes: one table per rank")
        cdef size_t r
        cdef int64_t i, t, total = self.base[ranks]
        self.sbase.resize(ranks)
        self.pending.resize(total)
        for r in range(ranks):
            t = table_of[r]
            if tbase[t + 1] - tbase[t] != self.base[r + 1] - self.base[r]:
                raise ValueError("CoreNodes: a rank's nodes differ in number from its table's")
            self.sbase[r] = tbase[t]
            for i in range(self.base[r + 1] - self.base[r]):
                self.pending[self.base[r] + i] = <int32_t>pending[tbase[t] + i]
        self.issued_at.resize(total, -1)
        # every node is done once: no growth by doubling (2x at worst, and a copy)
        self.col_rank.reserve(total)
        self.col_node.reserve(total)
        for k in range(2):
            self.cols[k].reserve(total)
        self.ready.resize(ranks)
        self.comp_busy.resize(ranks, 0)
        self.comm_busy.resize(ranks, 0)
        self.cpu_busy.resize(ranks, 0)
        self.finish_.resize(ranks, 0)
        self.compute_.resize(ranks, 0)
        self.comm_.resize(ranks)
        cdef int64_t comms
        cdef char c
        for r in range(ranks):
            comms = 0  # its communication nodes: a span each, held without growth by doubling
            for i in range(self.base[r + 1] - self.base[r]):
                c = self.code[self.sbase[r] + i]
                comms += c == N_COLL or c == N_SEND or c == N_RECV
            self.comm_[r].reserve(2 * comms)
            self.left_.push_back(self.base[r + 1] - self.base[r])
            for i in range(self.base[r + 1] - self.base[r]):
                if self.pending[self.base[r] + i] == 0:
                    self.ready[r].push_back(i)  # ascending: a heap already

    def gather(self, const int32_t[::1] group, const int64_t[::1] sizes, gathered, staggered, join):
        """Gather collectives' members here (see the class): `group` per node, its key (-1: Python
        gets every member through `issue_comm`), `sizes` per group number."""
        if group.shape[0] != <Py_ssize_t>self.base.back():
            raise ValueError("gather: one group number per node")
        self.group_.resize(group.shape[0])
        if group.shape[0]:
            memcpy(self.group_.data(), &group[0], group.shape[0] * sizeof(int32_t))
        _fill(self.gsize, sizes)
        self.gathered_fn, self.staggered_fn, self.join_fn = gathered, staggered, join

    cdef void _gather(self, int r, int64_t i, int64_t v) except *:
        """Rank r issues its node i, a collective of key `v`."""
        cdef int64_t grp = v >> 3
        cdef int64_t nranks = self.base.size() - 1
        cdef int64_t k = self.seen_[grp * nranks + r]
        self.seen_[grp * nranks + r] = k + 1
        cdef int64_t key = (grp << 32) | k
        cdef bint first = self.gathering.count(key) == 0
        cdef SimGather* gat = &self.gathering[key]  # (made here where it is the first member)
        if first:  # where Python queues its check of the instant (`Engine.issue_collective`)
            self._sched.push(self._sched.now, 1, EV_GATHER, self, key, 0, 0, None)
            gat.tag = v & 7
        gat.count += 1
        cdef bint last = gat.count == self.gsize[grp]
        if gat.handed:
            if last:
                self.gathering.erase(key)
            self.join_fn(r, self.ids[self.sbase[r] + i], grp, k)
            return
        gat.members.push_back(r)
        gat.members.push_back(i)
        if last:
            args = self._members(gat)
            self.gathering.erase(key)
            self.gathered_fn(grp, k, *args)

    cdef tuple _members(self, SimGather* gat):
        """The first member's tag, and (ranks, node ids, issue times) of the members gathered, in
        issue order."""
        cdef list ranks = [], node_ids = [], issued = []
        cdef size_t j
        cdef int64_t r, i
        for j in range(0, gat.members.size(), 2):
            r = gat.members[j]
            i = gat.members[j + 1]
            ranks.append(r)
            node_ids.append(self.ids[self.sbase[r] + i])
            issued.append(self.issued_at[self.base[r] + i])
        return gat.tag, ranks, node_ids, issued

    cdef void _instant_over(self, int64_t key) except *:
        cdef unordered_map[int64_t, SimGather].iterator it = self.gathering.find(key)
        if it == self.gathering.end() or deref(it).second.handed:
            return
        cdef SimGather* gat = &deref(it).second
        args = self._members(gat)
        gat.handed = True
        gat.members.clear()
        self.staggered_fn(key >> 32, key & 0xFFFFFFFF, *args)

    cdef void _live(self) except *:
        if self.pending.size() != <size_t>self.base.back():
            raise RuntimeError("CoreNodes: the run is over (release)")

    def start(self, ranks=None):
        """Issue what every rank (or each of `ranks`, in order) can issue now."""
        cdef size_t r
        self._live()
        if ranks is not None:
            for r in ranks:
                self._issue_ready(<int>r)
            return
        for r in range(self.ready.size()):
            self._issue_ready(<int>r)

    cdef inline void _push_ready(self, int r, int64_t i) noexcept:
        cdef vector[int64_t]* h = &self.ready[r]
        h.push_back(i)
        push_heap(h.begin(), h.end(), greater[int64_t]())

    cdef inline int64_t _pop_ready(self, int r) noexcept:
        cdef vector[int64_t]* h = &self.ready[r]
        pop_heap(h.begin(), h.end(), greater[int64_t]())
        cdef int64_t i = h.back()
        h.pop_back()
        return i

    cdef bint _available(self, int r, int64_t s) noexcept:
        cdef char c = self.code[s]
        if c == N_CPU:
            return not self.cpu_busy[r]
        if c == N_COMP:
            return not self.comp_busy[r]
        if c == N_COLL or c == N_SEND:
            return not self.comm_busy[r]
        return True

    cdef void _issue_ready(self, int r) except *:
        cdef vector[int64_t] keep  # of this call: issuing may come back here (a collective done at once)
        cdef int64_t i
        cdef size_t k
        while not self.ready[r].empty():
            i = self._pop_ready(r)
            if self._available(r, self.sbase[r] + i):
                self._issue(r, i)
            else:
                keep.push_back(i)
        for k in range(keep.size()):
            self._push_ready(r, keep[k])

    cdef void _issue(self, int r, int64_t i) except *:
        cdef int64_t g = self.base[r] + i
        cdef int64_t s = self.sbase[r] + i
        cdef int64_t now = self._sched.now
        self.issued_at[g] = now
        cdef char c = self.code[s]
        if c == N_CPU or c == N_COMP:
            if self.zero[s]:
                self._complete(r, i)
                return
            if c == N_CPU:
                self.cpu_busy[r] = 1
            else:
                self.comp_busy[r] = 1
                self.compute_[r] += self.dur[s]
            self._sched.push(now + self.dur[s], 0, EV_NODE, self, r, i, 0, None)
        elif c == N_COLL or c == N_SEND:
            self.comm_busy[r] = 1
            if c == N_COLL and self.group_.size() and self.group_[g] >= 0:
                self._gather(r, i, self.group_[g])
            else:
                self.issue_comm(r, self.ids[s], c)
        elif c == N_RECV:
            self.issue_comm(r, self.ids[s], c)
        else:
            self._complete(r, i)

    cdef int64_t _index(self, int r, int64_t node_id) except -1:
        """The index of rank r's node `node_id` among its nodes."""
        cdef int64_t first = self.sbase[r]
        cdef int64_t end = first + self.base[r + 1] - self.base[r]
        cdef int64_t lo = first, hi = end, mid
        while lo < hi:  # ids ascend within a rank
            mid = (lo + hi) >> 1
            if self.ids[mid] < node_id:
                lo = mid + 1
            else:
                hi = mid
        if lo >= end or self.ids[lo] != node_id:
            raise KeyError(node_id)
        return lo - first

    def on_done(self, int r, int64_t node_id):
        """Rank r's node `node_id` is done now."""
        self._live()
        self._on_done(r, self._index(r, node_id))

    def comm_done_at(self, int64_t start, list offsets, list ranks, list node_ids):
        """Rank `ranks[k]`'s communication node `node_ids[k]` is done at `start + offsets[k]`, each
        an event queued in this order (where a Python callback per member was, with the same places
        in the queue): its communication span (from its issue) is recorded, then it is done as by
        `on_done`."""
        cdef Py_ssize_t k, n = len(offsets)
        self._live()
        if len(ranks) != n or len(node_ids) != n:
            raise ValueError("comm_done_at: offsets, ranks and node_ids differ in length")
        cdef int r
        cdef int64_t i
        for k in range(n):
            r = ranks[k]
            i = self._index(r, node_ids[k])
            self._sched.push(start + <int64_t>offsets[k], 0, EV_COMM, self, r, i, 0, None)

    cdef void _told(self, int r, int64_t node_id) except *:
        """A collective run (`CoreCollectiveRun.tell`) says rank r's collective node `node_id` is
        done now."""
        self.told += 1
        self._comm_done(r, self._index(r, node_id))

    cdef void _comm_done(self, int r, int64_t i) except *:
        cdef int64_t g = self.base[r] + i
        cdef int64_t now = self._sched.now
        cdef int64_t start = self.issued_at[g]
        self.comm_[r].push_back(now if start < 0 else start)
        self.comm_[r].push_back(now)
        self._on_done(r, i)

    def comm_spans(self, int r):
        """Rank r's spans of the nodes `comm_done_at` finished: (start, end, start, end, ...) ns,
        handed over (freed here: a second call finds none)."""
        a = _array(self.comm_[r])
        vector[int64_t]().swap(self.comm_[r])
        return a

    cdef void _on_done(self, int r, int64_t i) except *:
        cdef char c = self.code[self.sbase[r] + i]
        if c == N_CPU:
            self.cpu_busy[r] = 0
        elif c == N_COMP:
            self.comp_busy[r] = 0
        elif c == N_COLL or c == N_SEND:
            self.comm_busy[r] = 0
        self._complete(r, i)
        self._issue_ready(r)

    cdef void _complete(self, int r, int64_t i) noexcept:
        cdef int64_t g = self.base[r] + i
        cdef int64_t now = self._sched.now
        cdef int64_t start = self.issued_at[g]
        self.issued_at[g] = -1
        self.col_rank.push_back(r)
        self.col_node.push_back(<int32_t>i)
        self.cols[0].push_back(now if start < 0 else start)
        self.cols[1].push_back(now)
        self.left_[r] -= 1
        self.nodes_done += 1
        if now > self.finish_[r]:
            self.finish_[r] = now
        cdef int64_t j, ch, s = self.sbase[r] + i
        for j in range(self.child_ptr[s], self.child_ptr[s + 1]):
            ch = self.child[j]
            self.pending[self.base[r] + ch] -= 1
            if self.pending[self.base[r] + ch] == 0:
                self._push_ready(r, ch)

    def rank_totals(self):
        """(nodes left, finish ns, compute ns) of every rank, as int64 arrays."""
        return _array(self.left_), _array(self.finish_), _array(self.compute_)

    def free_nodes(self, int r):
        """The ids of rank r's nodes that wait on no dependency (the Python walk's `pending` of 0)."""
        cdef int64_t i
        return [self.ids[self.sbase[r] + i] for i in range(self.base[r + 1] - self.base[r])
                if self.pending[self.base[r] + i] == 0]

    def release(self):
        """The run is over: the state of every rank (dependencies left, issue times, gathered keys,
        ready nodes, communication spans) is freed; the tables and the spans of the nodes done stay
        (`take_span_columns`)."""
        vector[int32_t]().swap(self.pending)
        vector[int64_t]().swap(self.issued_at)
        vector[int32_t]().swap(self.group_)
        vector[vector[int64_t]]().swap(self.ready)
        vector[vector[int64_t]]().swap(self.comm_)

    def take_span_columns(self):
        """(rank (int32), node id, start_ns, end_ns) of every node done, in completion order, handed
        over: each column is freed here as it is copied (a run's spans are held once, not twice),
        so that a second call finds none."""
        cdef size_t n = self.col_rank.size(), j
        rank = np.empty(n, dtype=np.int32)
        node = np.empty(n, dtype=np.int64)
        cdef int32_t[::1] rv = rank
        cdef int64_t[::1] nv = node
        for j in range(n):
            rv[j] = self.col_rank[j]
            nv[j] = self.ids[self.sbase[self.col_rank[j]] + self.col_node[j]]
        vector[int32_t]().swap(self.col_rank)
        vector[int32_t]().swap(self.col_node)
        out = [rank, node]
        cdef int k
        for k in range(2):
            out.append(_array(self.cols[k]))
            vector[int64_t]().swap(self.cols[k])
        return tuple(out)


# -- reading traces -------------------------------------------------------------------------------


cdef extern from *:
    """
    #include <string>
    #include <string_view>
    #include <deque>
    // Chakra ET frames (a varint length, then that many bytes), each distinct frame numbered once by
    // its bytes: a bundle's ranks repeat most of their nodes byte for byte (a pipeline stage's
    // compute nodes, a group's collectives), and a frame seen before needs no decoding
    struct SimFrameIndex {
        std::unordered_map<std::string_view, int64_t> seen;
        std::deque<std::string> held;  // the distinct frames' bytes (the map's keys point into them)
        // each frame's number into idx (a frame not seen before gets the next one); the frames seen
        // for the first time, as (frame, start, end), into fresh
        void number(const unsigned char* d, const int64_t* spans, int64_t nframes, int64_t* idx,
                    std::vector<int64_t>& fresh) {
            for (int64_t i = 0; i < nframes; ++i) {
                std::string_view v((const char*)d + spans[2 * i], (size_t)(spans[2 * i + 1] - spans[2 * i]));
                auto it = seen.find(v);
                if (it != seen.end()) {
                    idx[i] = it->second;
                    continue;
                }
                held.emplace_back(v);
                int64_t at = (int64_t)seen.size();
                seen.emplace(std::string_view(held.back()), at);
                idx[i] = at;
                fresh.push_back(i);
                fresh.push_back(spans[2 * i]);
                fresh.push_back(spans[2 * i + 1]);
            }
        }
    };
    """
    cdef cppclass SimFrameIndex:
        void number(const unsigned char* d, const int64_t* spans, int64_t nframes, int64_t* idx,
                    vector[int64_t]& fresh)


cdef inline int _uvarint(const unsigned char* d, Py_ssize_t n, Py_ssize_t* pos, unsigned long long* out,
                         int most=9) noexcept:
    """A varint of at most `most` bytes (at most 9: no bit beyond 63) at pos, which is advanced past
    it; 0 where it is longer or cut short."""
    cdef unsigned long long v = 0
    cdef Py_ssize_t p = pos[0]
    cdef int k
    cdef unsigned char b
    for k in range(most):
        if p >= n:
            return 0
        b = d[p]
        p += 1
        v |= (<unsigned long long>(b & 0x7F)) << (7 * k)
        if b < 0x80:
            pos[0] = p
            out[0] = v
            return 1
    return 0


cdef object _deps(const unsigned char* d, Py_ssize_t n, Py_ssize_t* pos, int wire, list into):
    """A dependency (wire type 0) or a packed run of them (2) appended to `into`; False where
    anything is irregular."""
    cdef unsigned long long v, length
    cdef Py_ssize_t end
    if wire == 0:
        if not _uvarint(d, n, pos, &v):
            return False
        into.append(v)
        return True
    if not _uvarint(d, n, pos, &length) or length > <unsigned long long>(n - pos[0]):
        return False
    end = pos[0] + <Py_ssize_t>length
    while pos[0] < end:
        if not _uvarint(d, end, pos, &v):
            return False
        into.append(v)
    return True


cdef class FrameIndex:
    """`chakra.decode.Interner`'s framing and numbering in C++: the frames of a trace, and each
    distinct frame's number by its bytes (over every trace given to one index)."""

    cdef SimFrameIndex* ix

    def __cinit__(self):
        self.ix = new SimFrameIndex()

    def __dealloc__(self):
        del self.ix

    def frames(self, const unsigned char[::1] data):
        """(start, end) of every frame, flat (int64), or None where the framing is anything but
        plain (a length of more than 5 bytes) or is broken (the Python reader then finds the
        frames, or the error)."""
        cdef vector[int64_t] out
        cdef Py_ssize_t n = data.shape[0], pos = 0
        cdef unsigned long long length
        if n == 0:
            return None
        while pos < n:
            if not _uvarint(&data[0], n, &pos, &length, 5) or length > <unsigned long long>(n - pos):
                return None
            out.push_back(pos)
            pos += <Py_ssize_t>length
            out.push_back(pos)
        return _array(out)

    def number(self, const unsigned char[::1] data, const int64_t[::1] spans):
        """Each frame's number (int64; `spans` flat (start, end) pairs, as `frames` gives them), and
        the frames seen for the first time as a flat int64 array of (frame, start, end)."""
        cdef int64_t m = spans.shape[0] // 2
        idx = np.empty(m, dtype=np.int64)
        cdef int64_t[::1] view = idx
        cdef vector[int64_t] fresh
        if m:
            self.ix.number(&data[0], &spans[0], m, &view[0], fresh)
        return idx, _array(fresh)

    def plain_nodes(self, const unsigned char[::1] data, const int64_t[::1] fresh, node, list types, dict attrs,
                    attr_of):
        """`_plain_nodes`: the nodes of the frames `number` found new (None where Python decodes)."""
        return _plain_nodes(data, fresh, node, types, attrs, attr_of)


cdef list _plain_nodes(const unsigned char[::1] data, const int64_t[::1] fresh, node, list types, dict attrs,
                       attr_of):
    """The nodes of frames (`fresh`: flat (frame, start, end)) as `chakra.decode._decode_node` reads
    them, for the frames a trace writer writes (keys of one byte; the Node fields id, name, type,
    dependencies, times and attributes, each attribute found by its bytes in `attrs` or else
    decoded by `attr_of`, None where it is malformed); None for any other (inputs and outputs,
    unknown fields, anything irregular): the Python reader decodes those, and says what is wrong
    where something is. `node` is the Node class, `types` the NodeTypes by value."""
    cdef Py_ssize_t m = fresh.shape[0] // 3
    cdef list out = [None] * m
    cdef Py_ssize_t k, pos, n, start, end
    cdef const unsigned char* d
    cdef unsigned char tag
    cdef unsigned long long v, length
    cdef bint ok
    cdef list ctrl, deps, found
    cdef object name, ntype, attr, body
    cdef unsigned long long ident, t0, dur
    for k in range(m):
        start = fresh[3 * k + 1]
        end = fresh[3 * k + 2]
        d = &data[0] + start
        n = end - start
        pos = 0
        ok = True
        ident = t0 = dur = 0
        name = ""
        ntype = types[0]
        ctrl = []
        deps = []
        found = []
        while pos < n:
            tag = d[pos]
            pos += 1
            if tag == 0x52:
                if not _uvarint(d, n, &pos, &length) or length > <unsigned long long>(n - pos):
                    ok = False
                    break
                body = (<const char*>d)[pos:pos + <Py_ssize_t>length]
                attr = attrs.get(body)
                if attr is None:
                    attr = attr_of(body)
                    if attr is None:
                        ok = False
                        break
                found.append(attr)
                pos += <Py_ssize_t>length
            elif tag == 0x08 or tag == 0x30 or tag == 0x38 or tag == 0x18:
                if not _uvarint(d, n, &pos, &v):
                    ok = False
                    break
                if tag == 0x08:
                    ident = v
                elif tag == 0x30:
                    t0 = v
                elif tag == 0x38:
                    dur = v
                else:
                    if v >= <unsigned long long>len(types):
                        ok = False
                        break
                    ntype = types[v]
            elif tag == 0x12:
                if not _uvarint(d, n, &pos, &length) or length > <unsigned long long>(n - pos):
                    ok = False
                    break
                try:
                    name = (<const char*>d)[pos:pos + <Py_ssize_t>length].decode("utf-8")
                except UnicodeDecodeError:
                    ok = False
                    break
                pos += <Py_ssize_t>length
            elif tag == 0x2A or tag == 0x28:
                if not _deps(d, n, &pos, tag & 7, deps):
                    ok = False
                    break
            elif tag == 0x22 or tag == 0x20:
                if not _deps(d, n, &pos, tag & 7, ctrl):
                    ok = False
                    break
            else:
                ok = False
                break
        if ok:
            out[k] = node(ident, name, ntype, ctrl, deps, t0, dur, None, None, found)
    return out


# -- ECMP -----------------------------------------------------------------------------------------


def ecmp_picks(list multi, int64_t flow, int64_t chunks):
    """`Comms._choices` on flows hashed one by one: for each (source, destination, paths) of `multi`
    and each chunk c, the path `Network.pick(source, destination, flow + c, paths)` gives (without
    pinned pairs), as one tuple."""
    cdef list out = []
    cdef int64_t s, d, n, c
    for s, d, n in multi:
        if n <= 0:
            raise ValueError("ecmp_picks: a pair without paths")
        for c in range(chunks):
            out.append(sim_pick(s, d, flow + c, n))
    return tuple(out)
