# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
# distutils: language = c++
"""flowsim's compiled core: the fluid network model (`netmodels.FastFluidNet`) in C++.

The same model, event for event: every flow, component, instant, rate and drain event of
`FastFluidNet` (its max-min rates progressive filling, the rates of a component looked up when
the same routes were solved before), with the flows, the links' flow lists, the component search
and the filling held in C++ instead of Python objects. The arithmetic is `netmodels`' own,
operation for operation (`_fill_small` for components of at most 12 flows, `_fill_numpy`'s
order of sums above), so finish times equal the Python engine's to the nanosecond
(tests/backends/test_engines.py runs both on random bundles).

Events still go through the engine's scheduler (`sched.Scheduler`), in the order the Python
model puts them there, so a run interleaves them with everything else exactly as it does.
"""

from libc.math cimport floor, INFINITY
from libc.stdint cimport int64_t
from libcpp.vector cimport vector
from libcpp.map cimport map as cmap
from libcpp.unordered_map cimport unordered_map
from libcpp.algorithm cimport sort
from libcpp.utility cimport pair
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from cython.operator cimport dereference as deref

cdef enum:
    #: Components of at most this many flows are filled as `netmodels._fill_small` does; larger
    #: ones as `_fill_numpy` (the same `_SMALL`).
    SMALL = 12
    #: Flows of the solutions kept at most (`FastFluidNet.MEMO`).
    MEMO = 1 << 20


cdef struct Flow:
    int64_t seq
    int route
    double remaining
    double rate
    int64_t t_upd
    int64_t version
    bint const_
    bint live
    PyObject* msg  # an owned reference while the flow is live


cdef inline bint _by_seq(const pair[int64_t, int]& a, const pair[int64_t, int]& b) noexcept:
    return a.first < b.first


cdef class CompiledFluidNet:
    """`netmodels.FastFluidNet` compiled: `send(msg)` a message now on the scheduler `sched`."""

    cdef public object sched
    cdef public list capacity
    cdef public list latency
    cdef public int64_t sent
    cdef public int64_t recomputes
    cdef public int64_t reused
    cdef vector[double] cap
    cdef vector[Flow] flows
    cdef vector[int] free_ids
    cdef vector[vector[int]] on_link
    cdef dict route_ids
    cdef vector[int] route_ptr
    cdef vector[int] route_keys
    cdef vector[int64_t] route_mult
    cdef cmap[vector[int], vector[double]] solved
    cdef int64_t kept
    cdef object dirty_sched
    cdef int64_t dirty_now
    cdef int64_t dirty_token
    cdef int64_t tokens
    cdef unordered_map[int64_t, vector[int]] dirty
    cdef vector[int64_t] key_stamp
    cdef vector[int64_t] flow_stamp
    cdef int64_t stamp
    cdef object _drain_cb
    cdef object _arrive_cb
    cdef object _recompute_cb

    name = "fluid"
    timed_alone = True
    clock = None
    shares = None

    def __init__(self, sched, capacity, latency):
        self.sched = sched
        self.capacity = list(capacity)
        self.latency = list(latency)
        self.cap = [float(c) for c in self.capacity]
        self.on_link.resize(len(self.capacity))
        self.key_stamp.resize(len(self.capacity), 0)
        self.route_ids = {}
        self.route_ptr.push_back(0)
        self.dirty_sched = None
        self.dirty_token = -1
        self._drain_cb = self._drain
        self._arrive_cb = self._arrive
        self._recompute_cb = self._recompute

    def __dealloc__(self):
        cdef size_t i
        for i in range(self.flows.size()):
            if self.flows[i].live:
                Py_XDECREF(self.flows[i].msg)
                self.flows[i].msg = NULL

    # -- messages --------------------------------------------------------------------------------

    def send(self, msg):
        s = self.sched
        cdef int64_t now = s.now
        msg.t_send = now
        keys = msg.keys
        if not keys:
            s.at(now + int(msg.latency), self._arrive_cb, msg)
            return
        self.sent += 1
        mult = msg.mult or (1,) * len(keys)
        rid = self.route_ids.get((keys, mult))
        if rid is None:
            rid = self.route_ids[(keys, mult)] = len(self.route_ids)
            for k in keys:
                self.route_keys.push_back(k)
            for m in mult:
                self.route_mult.push_back(m)
            self.route_ptr.push_back(self.route_keys.size())
        cdef int fid
        cdef Flow blank
        blank.version = 0
        blank.live = False
        blank.msg = NULL
        if self.free_ids.empty():
            fid = self.flows.size()
            self.flows.push_back(blank)
            self.flow_stamp.push_back(0)
        else:
            fid = self.free_ids.back()
            self.free_ids.pop_back()
        cdef Flow* f = &self.flows[fid]
        # the version goes on from the slot's last flow: a stale drain event never matches a new flow
        f.seq = self.sent
        f.route = rid
        f.remaining = <double>msg.size
        f.rate = 0.0
        f.t_upd = now
        f.const_ = True
        f.live = True
        Py_INCREF(msg)
        f.msg = <PyObject*>msg
        cdef int r = rid
        cdef int j
        for j in range(self.route_ptr[r], self.route_ptr[r + 1]):
            self.on_link[self.route_keys[j]].push_back(fid)
        self._mark(r, -1, now)

    cdef void _mark(self, int route, int skip_empty, int64_t now) except *:
        """Links of a route to solve again at `now`, after every ordinary event of it (`skip_empty`
        1: only the links that still carry flows)."""
        s = self.sched
        if self.dirty_token < 0 or self.dirty_sched is not s or self.dirty_now != now:
            self.tokens += 1
            self.dirty_token = self.tokens
            self.dirty_sched = s
            self.dirty_now = now
            s.after_all(now, self._recompute_cb, self.dirty_token)
        cdef vector[int]* keys = &self.dirty[self.dirty_token]
        cdef int j, k
        for j in range(self.route_ptr[route], self.route_ptr[route + 1]):
            k = self.route_keys[j]
            if skip_empty and self.on_link[k].empty():
                continue
            keys.push_back(k)

    def _arrive(self, msg):
        msg.t_arrive = self.sched.now
        msg.deliver(msg)

    def _drain(self, int fid, int64_t version):
        cdef Flow* f = &self.flows[fid]
        if not f.live or version != f.version:
            return
        f.version += 1
        cdef int r = f.route
        cdef int j, k
        cdef size_t i
        cdef vector[int]* lst
        cdef bint left = False
        for j in range(self.route_ptr[r], self.route_ptr[r + 1]):
            k = self.route_keys[j]
            lst = &self.on_link[k]
            for i in range(lst.size()):
                if lst[0][i] == fid:
                    lst[0][i] = lst.back()
                    lst.pop_back()
                    break
            if not lst.empty():
                left = True
        s = self.sched
        cdef int64_t now = s.now
        msg = <object>f.msg
        if left:
            self._mark(r, 1, now)
        cdef int64_t t
        if f.const_:
            t = <int64_t>msg.t_send + <int64_t>(<double>msg.latency + <double>msg.size / f.rate)
        else:
            t = now + <int64_t>(<double>msg.latency)
        f.live = False
        Py_XDECREF(f.msg)
        f.msg = NULL
        self.free_ids.push_back(fid)
        s.at(t if t > now else now, self._arrive_cb, msg)

    # -- rates -----------------------------------------------------------------------------------

    def _recompute(self, int64_t token):
        if token == self.dirty_token:
            self.dirty_token = -1
        cdef vector[int] keys = self.dirty[token]
        self.dirty.erase(token)
        cdef vector[int] comp = self._component(keys)
        if comp.empty():
            return
        self.recomputes += 1
        s = self.sched
        cdef int64_t now = s.now
        cdef size_t i
        cdef Flow* f
        for i in range(comp.size()):
            f = &self.flows[comp[i]]
            if f.t_upd != now:
                f.remaining -= f.rate * <double>(now - f.t_upd)
                f.t_upd = now
        cdef vector[double] rates = self._rates(comp)
        cdef double r, x
        cdef int64_t wait
        for i in range(comp.size()):
            f = &self.flows[comp[i]]
            r = rates[i]
            if r <= 0.0:
                f.const_ = False
            if r != f.rate:
                if f.rate != 0.0:
                    f.const_ = False
                f.rate = r
                f.version += 1
                if r > 0.0:
                    x = floor(f.remaining / r)
                    wait = <int64_t>x if x > 0 else 0
                    s.at(now + wait, self._drain_cb, comp[i], f.version)

    cdef vector[int] _component(self, vector[int]& keys):
        """The flows connected to `keys` through shared links, in the order they were sent."""
        self.stamp += 1
        cdef int64_t st = self.stamp
        cdef vector[int] stack
        cdef vector[pair[int64_t, int]] found
        cdef size_t i
        cdef int k, k2, fid, j, r
        for i in range(keys.size()):
            k = keys[i]
            if self.key_stamp[k] != st:
                self.key_stamp[k] = st
                stack.push_back(k)
        while not stack.empty():
            k = stack.back()
            stack.pop_back()
            for i in range(self.on_link[k].size()):
                fid = self.on_link[k][i]
                if self.flow_stamp[fid] == st:
                    continue
                self.flow_stamp[fid] = st
                found.push_back(pair[int64_t, int](self.flows[fid].seq, fid))
                r = self.flows[fid].route
                for j in range(self.route_ptr[r], self.route_ptr[r + 1]):
                    k2 = self.route_keys[j]
                    if self.key_stamp[k2] != st:
                        self.key_stamp[k2] = st
                        stack.push_back(k2)
        sort(found.begin(), found.end(), _by_seq)
        cdef vector[int] out
        out.reserve(found.size())
        for i in range(found.size()):
            out.push_back(found[i].second)
        return out

    cdef vector[double] _rates(self, vector[int]& comp):
        """The component's max-min rates: solved before for the same routes in the same order, or now."""
        cdef vector[int] sig
        sig.reserve(comp.size())
        cdef size_t i
        for i in range(comp.size()):
            sig.push_back(self.flows[comp[i]].route)
        cdef cmap[vector[int], vector[double]].iterator it = self.solved.find(sig)
        if it != self.solved.end():
            self.reused += 1
            return deref(it).second
        cdef vector[double] rates
        if comp.size() == 1:
            rates = self._single(sig[0])
        elif comp.size() <= SMALL:
            rates = self._fill_small(sig)
        else:
            rates = self._fill_large(sig)
        self.kept += comp.size()
        if self.kept > MEMO:
            self.solved.clear()
            self.kept = comp.size()
        self.solved[sig] = rates
        return rates

    cdef vector[double] _single(self, int r):
        cdef double best = INFINITY
        cdef double x
        cdef int j
        for j in range(self.route_ptr[r], self.route_ptr[r + 1]):
            x = self.cap[self.route_keys[j]] / <double>self.route_mult[j]
            if x < best:
                best = x
        cdef vector[double] out
        out.push_back(best)
        return out

    cdef vector[double] _fill_small(self, vector[int]& routes):
        """`netmodels._fill_small` without weights: the same sums in the same order."""
        cdef vector[int] links  # in the order first met
        cdef unordered_map[int, int] slot
        cdef vector[double] rem
        cdef vector[int64_t] weight
        cdef vector[int] count
        cdef size_t i, n = routes.size()
        cdef int j, k, r, l
        cdef unordered_map[int, int].iterator it
        for i in range(n):
            r = routes[i]
            for j in range(self.route_ptr[r], self.route_ptr[r + 1]):
                k = self.route_keys[j]
                it = slot.find(k)
                if it == slot.end():
                    slot[k] = links.size()
                    l = links.size()
                    links.push_back(k)
                    rem.push_back(self.cap[k])
                    weight.push_back(0)
                    count.push_back(0)
                else:
                    l = deref(it).second
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
                    if bottleneck[slot[self.route_keys[j]]]:
                        hit = True
                        break
                if not hit:
                    continue
                active[i] = 2  # frozen this round
            for i in range(n):
                if active[i] != 2:
                    continue
                rates[i] = s
                r = routes[i]
                for j in range(self.route_ptr[r], self.route_ptr[r + 1]):
                    l = slot[self.route_keys[j]]
                    rem[l] -= <double>self.route_mult[j] * s
                    weight[l] -= self.route_mult[j]
                    count[l] -= 1
                active[i] = 0
                left -= 1
        return rates

    cdef vector[double] _fill_large(self, vector[int]& routes):
        """`netmodels._fill_numpy` without weights: links in ascending order, the sums of numpy's
        bincount (in entry order, from 0.0), the same operations."""
        cdef size_t n = routes.size()
        cdef vector[int] entry_flow
        cdef vector[int] entry_link
        cdef vector[double] entry_mult
        cdef vector[int] sorted_links
        cdef size_t i, e, E
        cdef int j, r
        for i in range(n):
            r = routes[i]
            for j in range(self.route_ptr[r], self.route_ptr[r + 1]):
                entry_flow.push_back(i)
                entry_link.push_back(self.route_keys[j])
                entry_mult.push_back(<double>self.route_mult[j])
                sorted_links.push_back(self.route_keys[j])
        sort(sorted_links.begin(), sorted_links.end())
        cdef vector[int] links
        for e in range(sorted_links.size()):
            if links.empty() or links.back() != sorted_links[e]:
                links.push_back(sorted_links[e])
        cdef unordered_map[int, int] slot
        cdef size_t L = links.size()
        cdef vector[double] remaining = vector[double](L, 0.0)
        for e in range(L):
            slot[links[e]] = e
            remaining[e] = self.cap[links[e]]
        E = entry_flow.size()
        cdef vector[int] local = vector[int](E, 0)
        for e in range(E):
            local[e] = slot[entry_link[e]]
        cdef vector[double] rates = vector[double](n, 0.0)
        cdef vector[char] active = vector[char](n, 1)
        cdef vector[char] frozen = vector[char](n, 0)
        cdef vector[double] weight = vector[double](L, 0.0)
        cdef vector[double] share = vector[double](L, 0.0)
        cdef vector[double] freed = vector[double](L, 0.0)
        cdef size_t left = n
        cdef double s, limit
        while left:
            for e in range(L):
                weight[e] = 0.0
                freed[e] = 0.0
            for e in range(E):
                if active[entry_flow[e]]:
                    weight[local[e]] += entry_mult[e]
            s = INFINITY
            for e in range(L):
                share[e] = remaining[e] / weight[e] if weight[e] > 0 else INFINITY
                if share[e] < s:
                    s = share[e]
            limit = s * (1 + 1e-12)
            for i in range(n):
                frozen[i] = 0
            for e in range(E):
                if active[entry_flow[e]] and share[local[e]] <= limit:
                    frozen[entry_flow[e]] = 1
            for i in range(n):
                if frozen[i]:
                    rates[i] = s
            for e in range(E):
                if frozen[entry_flow[e]]:
                    freed[local[e]] += entry_mult[e]
            for e in range(L):
                remaining[e] = remaining[e] - freed[e] * s
            for i in range(n):
                if frozen[i]:
                    active[i] = 0
                    left -= 1
        return rates
