"""The state the planner reads and writes, one object each, with one set of field constants.

Why here and only here: the planner is the compiled kernels (``plan_kernels``, ``apply_kernels``,
``queue_kernels``); every driver (the SimPy fleet, the fleet kernel, restarts, trace replay, the
``Scheduler`` facade the real serving loop uses) holds these NamedTuples of arrays, which numba
takes as they are. A request is one row of ``Requests.ints``/``floats`` (its fields read and
written together), a replica one ``Replica`` (its limits, counters, running list, waiting ring,
queue log and the last plan's scratch rows), the run's logs one ``Logs``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sim.model.kernels.kernel_cache import njit

# status of a request
WAITING, RUNNING, DONE = 0, 1, 2
# outcome of an ended request (0: none yet), and its name in the records
COMPLETED, REJECTED, TIMED_OUT = 1, 2, 3
TOO_LONG = 4
"""Rejected because prompt + output cannot fit ``max_model_len`` (vLLM's HTTP 400): a rejection in
the records (``outcome`` "rejected"), told apart by their ``too_long`` column."""
OUTCOME_NAMES = (None, "completed", "rejected", "timed_out", "rejected")

# Requests.ints columns (int64)
(PROMPT, OUTPUT, COMPUTED, GENERATED, BLOCKS, BURSTS, SPEC, DRAFTS, ACCEPTED, PROPOSES, STATUS,
 OUTCOME, PREEMPT, EVER, IN_BATCH, REPLAY_POS, REPLAY_OFF, REPLAY_LEN, REPLAY_STEPS) = range(19)
# ... and its prompt's prefix blocks (``sim.model.kernels.prefix_cache``): where its block ids lie in
# ``Requests.pfx``, how many, how many leading ones it holds in the replica's cache, the prompt
# tokens its first admission found cached, and how many leading ones its current admission hit
PFX_OFF, PFX_LEN, PFX_HELD, PFX_HIT, PFX_TOUCH = range(19, 24)
N_INTS = 24
# Requests.floats columns (float64)
LAST_BURST, MAX_PAUSE, PROPOSAL, FIRST_TOKEN, SCHEDULED, FINISH = range(6)
N_FLOATS = 6

# Replica.cfg (int64): limits and flags of one replica
C_INDEX, C_SEQS, C_BUDGET, C_BS, C_KV, C_CHUNKED, C_TRACK, C_PARTIAL, C_KMAX, C_QLIMIT = range(10)
C_PREFIX = 10
"""1: prefix caching on (``sim.model.kernels.prefix_cache``)."""
C_FULLW = 11
"""1: a decoding row without a proposal still verifies ``k`` filled draft slots
(``sim.model.serving_engine``: vLLM's Model Runner V2, SGLang, TensorRT-LLM)."""
C_MAXLEN = 12
"""The model's context length in tokens (``max_model_len``; 0: none known, nothing refused)."""
N_CFG = 13
# Replica.meta (int64): counters, the last plan's sizes, the replica's deadline cursors
# (``arrival_kernels.expire_due``)
(M_NRUN, M_HEAD, M_NWAIT, M_FREE, M_QLOG, M_ND, M_NPF, M_K, M_DRAFTS_ALL, M_NPRE, M_PREV, M_QNOTE,
 M_KVNOTE, M_PFTOK, M_NDRAFT, M_QCUR, M_TCUR) = range(17)
M_EVICT = 17
"""Cached blocks no request holds (evictable; counted in ``M_FREE`` too)."""
N_META = 18

# Logs.G (int64): fleet-wide log positions
G_GAPS, G_STEPS, G_UNI = range(3)
ROW = 12
"""Values per logged step (``sim.model.step_protocol.ROW_WIDTH``)."""


class Requests(NamedTuple):
    """Every request of a run (or of a ``Scheduler``), one row each."""

    ints: np.ndarray
    floats: np.ndarray
    negrates: np.ndarray
    """Acceptance survival rates negated (ascending), one row per request, ``k_max`` wide."""
    replay: np.ndarray
    """Traced accepted lengths of replaying requests, flat (``REPLAY_OFF``/``REPLAY_LEN``)."""
    pfx: np.ndarray = np.zeros(1, np.int64)
    """Prompt prefix-block ids of every request, flat (``PFX_OFF``/``PFX_LEN``; never written)."""


class Replica(NamedTuple):
    """One replica's limits, counters, running list, waiting ring, queue log and scratch rows."""

    cfg: np.ndarray
    meta: np.ndarray
    run_idx: np.ndarray
    """Running requests' rows in admission order (``meta[M_NRUN]`` of them)."""
    ring: np.ndarray
    """Waiting requests' rows, a ring from ``meta[M_HEAD]`` (``meta[M_NWAIT]`` of them)."""
    qlog: np.ndarray
    """(time, +1 | -1) per queue entry and exit, flat (``meta[M_QLOG]`` values)."""
    dec_rows: np.ndarray
    """The last plan's decoding requests as positions in ``run_idx``."""
    dec_draft: np.ndarray
    pf_rows: np.ndarray
    pf_n: np.ndarray
    prev_idx: np.ndarray
    """The last decode batch's rows (``DecodeBatchRows``)."""
    pre: np.ndarray
    """The last plan's preempted rows."""
    acc: np.ndarray
    """Accepted drafts per decoding request of the last plan (what happened, passed in)."""
    cache: np.ndarray = np.zeros((1, 5), np.int64)
    """The prefix cache: per block id its first copy's reference count (-1: not cached), LRU
    links, the request that computed that copy and still holds it (-1: none) and how many other
    requests hold a duplicate copy; one sentinel row last (``sim.model.kernels.prefix_cache``)."""


class Logs(NamedTuple):
    """The run's ITL samples, step rows and uniforms (positions in ``G``)."""

    G: np.ndarray
    gap_idx: np.ndarray
    gap_s: np.ndarray
    steps: np.ndarray
    uni: np.ndarray


def new_requests(n: int, k_max: int) -> Requests:
    """``n`` empty rows (times NaN: not reached)."""
    floats = np.zeros((n, N_FLOATS), np.float64)
    floats[:, FIRST_TOKEN:FINISH + 1] = np.nan
    floats[:, PROPOSAL] = 1.0
    ints = np.zeros((n, N_INTS), np.int64)
    ints[:, PROPOSES] = 1
    return Requests(ints, floats, np.zeros((n, max(k_max, 1)), np.float64), np.zeros(1, np.int64))


def new_replica(config, index: int, ring: int, *, track: bool, partial: bool, k_max: int,
                prefix_blocks: int = 0) -> Replica:
    """An empty replica of ``config`` (a ``SchedulerConfig``) whose ring holds ``ring`` rows
    (``prefix_blocks``: distinct prefix-block ids of the run, the cache's size). The one place
    the engine's limits (``config.limits``, an ``EngineLimits``) become the kernel row. Its KV
    ledger opens closed, no block free: the caller opens it with ``kv_blocks.open_ledger`` (the
    ledger's one writer, which imports this module, so it cannot be called from here)."""
    lim = config.limits
    cfg = np.zeros(N_CFG, np.int64)
    cfg[C_INDEX] = index
    cfg[C_SEQS] = lim.max_num_seqs
    cfg[C_BUDGET] = lim.max_num_batched_tokens
    cfg[C_BS] = lim.block_size
    cfg[C_CHUNKED] = lim.chunked_prefill
    cfg[C_MAXLEN] = lim.max_model_len or 0
    cfg[C_KV] = config.kv_blocks
    cfg[C_TRACK] = track
    cfg[C_PARTIAL] = partial
    cfg[C_KMAX] = k_max
    cfg[C_QLIMIT] = -1 if config.queue_limit is None else config.queue_limit
    cfg[C_PREFIX] = config.prefix_caching
    cfg[C_FULLW] = config.full_width_drafts
    meta = np.zeros(N_META, np.int64)
    seqs = lim.max_num_seqs

    def rows() -> np.ndarray:
        return np.zeros(seqs, np.int64)

    cache = np.zeros((prefix_blocks + 1 if cfg[C_PREFIX] else 1, 5), np.int64)
    empty_cache(cache)
    return Replica(cfg, meta, rows(), np.zeros(ring + 1, np.int64), np.zeros(1 << 12, np.float64),
                   rows(), rows(), rows(), rows(), rows(), rows(), rows(), cache)


def empty_cache(cache: np.ndarray) -> None:
    """No block cached; the LRU list (a ring through the sentinel, the last row) empty."""
    s = len(cache) - 1
    for u in range(s):
        cache[u, 0] = -1
        cache[u, 3] = -1
        cache[u, 4] = 0
    cache[s, 1] = s
    cache[s, 2] = s


def new_logs(gaps: int, steps: int) -> Logs:
    return Logs(np.zeros(3, np.int64), np.empty(gaps, np.int64), np.empty(gaps, np.float64),
                np.empty(ROW * steps, np.float64), np.empty(0))


def with_qlog_room(rp: Replica, entries: int) -> Replica:
    """``rp``, or a copy with a longer queue log, with room for ``entries`` more entries."""
    used = int(rp.meta[M_QLOG])
    qlog = rp.qlog
    while used + 2 * entries > len(qlog):
        qlog = doubled(qlog, used)
    return rp if qlog is rp.qlog else rp._replace(qlog=qlog)


def doubled(a: np.ndarray, used: int) -> np.ndarray:
    """A copy of ``a`` twice as long, its first ``used`` values kept."""
    out = np.empty(2 * len(a), a.dtype)
    out[:used] = a[:used]
    return out


@njit
def replica_at(st, r):
    """Replica ``r`` of a fleet's stacked state (each field one row per replica), as views."""
    return Replica(st.cfg[r], st.meta[r], st.run_idx[r], st.ring[r], st.qlog[r], st.dec_rows[r],
                   st.dec_draft[r], st.pf_rows[r], st.pf_n[r], st.prev_idx[r], st.pre[r], st.acc[r],
                   st.cache[r])
