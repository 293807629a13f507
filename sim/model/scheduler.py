"""``Scheduler``: the compiled planner behind the request-object API the real serving loop uses.

The rules live in the kernels (``plan_kernels``, ``apply_kernels``, ``queue_kernels``,
``deadlines``); this facade holds one replica's state (``kernel_state``) for ``Request`` objects
that arrive one by one, reads the one field a caller may change on them (``proposes``: the real
loop's proposer says which rows have a draft) before every call and writes each request's state
back after it,
so ``StepCycle`` and ``profiler/passes/serving.py`` see the objects as they always did. It costs
microseconds a request per step: fine for a loop that runs real forward passes, and the
simulator's fleet drives the kernels directly.

``schedule(now, k)`` returns a frozen :class:`StepPlan`; the caller runs or times it, then calls
``update(plan, accepted, end)`` with the drafts the target accepted per decoding request.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import numpy as np

from sim.model.deadlines import Deadlines
from sim.model.fleet_arrays import store_rows
from sim.model.kernels import kernel_state as ks
from sim.model.kernels import kv_blocks as kv
from sim.model.kernels import queue_kernels as qk
from sim.model.kernels.apply_kernels import apply_step
from sim.model.kernels.plan_kernels import num_decoding, plan_step
from sim.model.step_plan import EMPTY_PLAN, Request, SchedulerConfig, StepPlan


class Scheduler:
    """Continuous-batching planner of one replica over ``Request`` objects (see the module)."""

    def __init__(self, config: SchedulerConfig, prefix_blocks: int = 0) -> None:
        """``prefix_blocks``: how many distinct prefix-block ids requests may carry (ids
        ``0..prefix_blocks-1``; the cache's size when ``config.prefix_caching``)."""
        self.config = config
        self.prefix_blocks = prefix_blocks
        self.finished: list[Request] = []
        self._reqs: list[Request] = []
        self._row: dict[int, int] = {}  # id(request) -> row
        self._live: list[int] = []  # rows whose objects are written back after each call
        self.rq = ks.new_requests(16, 0)
        self.rp = kv.open_ledger(ks.new_replica(config, 0, 16, track=False, partial=False, k_max=0,
                                                prefix_blocks=prefix_blocks))
        self._pfx: list[int] = []
        seqs = config.max_num_seqs
        self.lg = ks.new_logs(3 * seqs + 2, 1)
        self.deadlines = Deadlines(config.max_queue_time_s)
        self._plan: StepPlan = EMPTY_PLAN

    # ------------------------------------------------------------------ views
    @property
    def running(self) -> list[Request]:
        m = self.rp.meta
        return [self._reqs[r] for r in self.rp.run_idx[: m[ks.M_NRUN]].tolist()]

    @property
    def waiting(self) -> list[Request]:
        m, ring = self.rp.meta, self.rp.ring
        head, n = int(m[ks.M_HEAD]), len(ring)
        return [self._reqs[int(ring[(head + i) % n])] for i in range(int(m[ks.M_NWAIT]))]

    @property
    def free_blocks(self) -> int:
        return int(self.rp.meta[ks.M_FREE])

    @property
    def queue_log(self) -> array:
        """(time, +1 | -1) pairs, flat: every entry to and exit from the waiting queue."""
        return array("d", self.rp.qlog[: int(self.rp.meta[ks.M_QLOG])].tobytes())

    @property
    def has_work(self) -> bool:
        m = self.rp.meta
        return bool(m[ks.M_NRUN] or m[ks.M_NWAIT])

    def num_decoding(self) -> int:
        """Running requests past their prompt (candidates for a decode slot this step)."""
        return int(num_decoding(self.rp, self.rq))

    def used_blocks(self) -> int:
        return self.config.kv_blocks - self.free_blocks

    # ------------------------------------------------------------------ admission
    def add_request(self, req: Request, now: float, k_max: int = 0) -> bool:
        """Admit an arriving request to the waiting queue; False (and rejected) if refused:
        the queue is full, or it could never run here (``queue_kernels.admit``)."""
        self._read_in()
        r = self._load(req)
        self.rp.cfg[ks.C_KMAX] = k_max
        ok = qk.admit(self._room(1), self.rq, r, float(now))
        if ok:
            self.deadlines.add(r, req.arrival_s, req.timeout_s, req.ever_scheduled)
        self._write_back()
        return bool(ok)

    def adopt(self, req: Request, now: float) -> None:
        """Take over a request re-routed from a restarted replica (keeps its deadlines)."""
        self._read_in()
        r = self._row.get(id(req))
        if r is None:
            r = self._load(req)
        elif r not in self._live:
            self._live.append(r)
        qk.enqueue(self._room(1), self.rq, r, float(now))
        self.deadlines.add(r, req.arrival_s, req.timeout_s, bool(self.rq.ints[r, ks.EVER]))
        self._write_back()

    def expire(self, now: float) -> None:
        """End requests whose client gave up or that waited past ``max_queue_time_s``."""
        self._read_in()
        self.deadlines.expire(self.rp, self.rq, float(now), lambda: self._room(1))
        self._write_back()

    # ------------------------------------------------------------------ a step
    def schedule(self, now: float, k: int = 0) -> StepPlan:
        """Plan one step at ``now`` with ``k`` draft tokens per decoding request."""
        self.expire(now)
        while True:
            p = plan_step(self.rp, self.rq, self.lg, float(now), k)
            if p[0] >= 0:
                break
            self._room(self.config.max_num_seqs + len(self._live) + 1)
        nd, npf, k, ctx, cmax, pf_tokens, pfc, _, _, drafting = p
        rp, reqs = self.rp, self._reqs
        run = rp.run_idx
        npre = int(rp.meta[ks.M_NPRE])
        preempted = tuple(reqs[r] for r in rp.pre[:npre].tolist())
        if nd == 0 and npf == 0:
            plan = EMPTY_PLAN
        else:
            chunks = zip(rp.pf_rows[:npf].tolist(), rp.pf_n[:npf].tolist(), strict=True)
            plan = StepPlan(
                tuple(reqs[run[j]] for j in rp.dec_rows[:nd].tolist()), int(k),
                tuple((reqs[run[j]], n) for j, n in chunks), preempted, float(ctx),
                int(pf_tokens), float(pfc), float(cmax),
                () if drafting < 0 else tuple(bool(d) for d in rp.dec_draft[:nd].tolist()))
        self._plan = plan
        self._write_back()
        return plan

    def update(self, plan: StepPlan, accepted: Sequence[int] | None, now: float,
               gap_idx: array | None = None, gap_s: array | None = None) -> int:
        """Apply the last planned step, finished at ``now``; returns the accepted draft tokens.

        ``accepted[i]`` is how many of ``plan.k`` drafts the target kept for ``plan.decode[i]``
        (0..k; None: none). ``gap_idx``/``gap_s`` (optional) receive each burst's request index
        and seconds since its previous burst (ITL samples)."""
        if plan is not self._plan:
            raise ValueError("Scheduler.update: not the plan the last schedule() returned")
        self._read_in()
        nd = len(plan.decode)
        self.rp.acc[:nd] = 0 if not plan.k or accepted is None else np.asarray(accepted)
        self.lg.G[ks.G_GAPS] = 0
        total = int(apply_step(self.rp, self.rq, self.lg, float(now)))
        if gap_s is not None and gap_idx is not None:
            g = int(self.lg.G[ks.G_GAPS])
            gap_idx.extend(self._reqs[r].idx for r in self.lg.gap_idx[:g].tolist())
            gap_s.extend(self.lg.gap_s[:g].tolist())
        self.lg.G[ks.G_GAPS] = 0
        self._plan = EMPTY_PLAN
        self._write_back()
        return total

    # ------------------------------------------------------------------ restarts
    def evacuate(self, now: float) -> list[Request]:
        """Take every in-flight request out (replica going down): KV freed, nothing computed.
        Returned oldest-admitted first (running ones, then the waiting queue in order)."""
        self._read_in()
        m = self.rp.meta
        out = np.empty(int(m[ks.M_NRUN] + m[ks.M_NWAIT]), np.int64)
        n = qk.evacuate(self._room(len(out)), self.rq, out, float(now))
        self.deadlines.clear()
        self._write_back()
        return [self._reqs[r] for r in out[:n].tolist()]

    def drop_all(self, now: float) -> list[Request]:
        """End every in-flight request as lost with the replica (outcome ``rejected``)."""
        out = self.evacuate(now)
        for req in out:
            qk.end_request(self.rp, self.rq, self._row[id(req)], ks.REJECTED, float(now))
        self._write_back()
        return out

    # ------------------------------------------------------------------ objects <-> rows
    def _load(self, req: Request) -> int:
        """A new row holding ``req``'s state as its object says (it holds no KV blocks here
        yet: the ledger's fields are ``kv_blocks``'s to write)."""
        r = len(self._reqs)
        if r == len(self.rq.ints):
            self._grow()
        self._reqs.append(req)
        self._row[id(req)] = r
        self._live.append(r)
        iv, fv = self.rq.ints[r], self.rq.floats[r]
        iv[[ks.PROMPT, ks.OUTPUT, ks.COMPUTED, ks.GENERATED, ks.BURSTS, ks.SPEC,
            ks.DRAFTS, ks.ACCEPTED, ks.PROPOSES, ks.STATUS, ks.PREEMPT, ks.EVER]] = (
            req.prompt_tokens, req.output_tokens, req.computed, req.generated,
            req.num_bursts, req.num_spec_steps, req.num_drafts, req.accepted_tokens,
            req.proposes, req.status, req.preemptions, req.ever_scheduled)
        iv[ks.OUTCOME] = ks.TOO_LONG if req.too_long else ks.OUTCOME_NAMES.index(req.outcome)
        if req.prefix is not None and self.config.prefix_caching:
            ids = [int(u) for u in req.prefix]
            if any(not 0 <= u < self.prefix_blocks for u in ids):
                raise ValueError(f"request {req.id}: prefix ids must be in [0, {self.prefix_blocks})")
            iv[ks.PFX_OFF], iv[ks.PFX_LEN] = len(self._pfx), len(ids)
            self._pfx.extend(ids)
            self.rq = self.rq._replace(pfx=np.array(self._pfx or [0], np.int64))
        fv[:] = (req.last_burst_s, req.max_pause_s, req.proposal, *(
            np.nan if x is None else x for x in (req.first_token_s, req.scheduled_s, req.finish_s)))
        return r

    def _grow(self) -> None:
        """Twice the rows, and a ring that holds them all (the waiting queue laid out from 0)."""
        n = len(self.rq.ints)
        more = ks.new_requests(n, 0)
        self.rq = ks.Requests(np.concatenate((self.rq.ints, more.ints)),
                              np.concatenate((self.rq.floats, more.floats)),
                              np.concatenate((self.rq.negrates, more.negrates)), self.rq.replay,
                              self.rq.pfx)
        waiting = [self._row[id(req)] for req in self.waiting]
        ring = np.zeros(2 * n + 1, np.int64)
        ring[: len(waiting)] = waiting
        self.rp.meta[ks.M_HEAD] = 0
        self.rp = self.rp._replace(ring=ring)

    def _room(self, entries: int) -> ks.Replica:
        self.rp = ks.with_qlog_room(self.rp, entries)
        return self.rp

    def _read_in(self) -> None:
        """What a caller may change between calls: whether a request has a proposal."""
        live = self._live
        if live:
            self.rq.ints[live, ks.PROPOSES] = [self._reqs[r].proposes for r in live]

    def _write_back(self) -> None:
        """Every live request's state into its object; those that ended are ``finished``."""
        live = self._live
        if not live:
            return
        reqs = [self._reqs[r] for r in live]
        store_rows(self.rq, live, reqs)
        done = self.rq.ints[live, ks.STATUS] == ks.DONE
        if done.any():
            self.finished.extend(req for req, d in zip(reqs, done.tolist(), strict=True) if d)
            self._live = [r for r, d in zip(live, done.tolist(), strict=True) if not d]
