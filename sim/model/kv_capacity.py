"""Usable KV cache (tokens and whole blocks) for a memory utilization, with or without a draft.

Capacity decides how many requests decode at once and when the scheduler preempts, and a
resident draft model takes memory away from it; this is where that trade-off is computed
(formula in docs/profile-format.md, ``memory`` section). A replica of ``t`` GPUs (tensor
parallelism, ``profile.replica``) shards weights and KV over them; its profile's memory numbers
are the replica's totals (device memory = ``t`` × one GPU's, activations summed over the GPUs), so
the same formula holds: ``u·t·M − W − t·A = t·(u·M − W/t − A)``, each GPU's share times ``t``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile


@dataclass(frozen=True)
class KvCapacity:
    """Usable KV cache of one replica."""

    kv_tokens: int
    """Token slots, rounded down to whole blocks (``kv_blocks * block_size``)."""
    kv_blocks: int
    """Whole KV blocks of ``block_size`` tokens."""
    block_size: int
    memory_utilization: float
    proposer: str | None
    """Resident proposer whose weights, activations and KV share the memory (None: target alone)."""
    budget_bytes: int
    """Bytes left for the KV cache after weights and activation peaks."""
    bytes_per_token: int
    """KV bytes per token: target plus the resident draft's (whole replica, all its GPUs)."""
    tensor_parallel_size: int = 1
    """GPUs of the replica the KV cache is sharded over."""

    @property
    def kv_bytes_per_gpu(self) -> float:
        """KV cache bytes each GPU holds when the cache is full."""
        return self.kv_tokens * self.bytes_per_token / self.tensor_parallel_size


def kv_capacity(
    profile: Profile,
    memory_utilization: float,
    block_size: int,
    proposer: str | None = None,
) -> KvCapacity:
    """Usable KV tokens and blocks; ``SpecplanError`` saying how much is missing if none fit.

    ``floor((u·device − reserve − target weights − target activations − Σ draft weights and
    activations) / (target KV bytes/token + draft KV bytes/token))``, rounded down to whole blocks, every
    number the replica's total over its GPUs. A proposer of kind ``ngram`` needs no memory entry
    (it holds no weights); others must have one.
    """
    if not 0 < memory_utilization <= 1:
        raise ValueError(f"memory_utilization must be in (0, 1], got {memory_utilization}")
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    mem = profile.memory
    extra_bytes = 0
    extra_per_token = 0
    if proposer is not None:
        if proposer not in profile.proposers:
            raise profile.error(
                f"proposers.{proposer}",
                f"unknown proposer {proposer!r} (profile proposers: {', '.join(profile.proposers) or 'none'})",
            )
        pm = mem.proposers.get(proposer)
        if pm is None:
            if profile.proposers[proposer].kind != "ngram":
                raise profile.error(
                    f"memory.proposers.{proposer}",
                    f"missing: proposer {proposer!r} ({profile.proposers[proposer].kind}) needs weight, "
                    "KV and activation bytes to compute KV capacity",
                )
        else:
            extra_bytes = pm.weight_bytes + pm.activation_peak_bytes
            extra_per_token = pm.kv_bytes_per_token
    tp = profile.replica.tensor_parallel_size
    usable = int(memory_utilization * mem.device_memory_bytes) - mem.reserve_bytes
    budget = usable - mem.target_weight_bytes - mem.activation_peak_bytes - extra_bytes
    per_token = mem.target_kv_bytes_per_token + extra_per_token
    tokens = budget // per_token if budget > 0 else 0
    blocks = tokens // block_size
    if blocks < 1:
        need = block_size * per_token - budget
        with_draft = f" with proposer {proposer!r} resident" if proposer else ""
        drafts = f" + memory.proposers.{proposer}" if proposer else ""  # every input named
        reserved = f" less memory.reserve ({_gib(mem.reserve_bytes)})" if mem.reserve_bytes else ""
        if tp > 1:
            with_draft += f" on {tp} GPUs (tensor parallel)"
        raise profile.error(
            "memory",
            f"no KV block fits at memory_utilization {memory_utilization:g}{with_draft}: "
            f"{_gib(need)} more memory needed for one block of {block_size} tokens "
            f"(usable {_gib(usable)} of device_memory_bytes{reserved}, weights+activations {_gib(usable - budget)} "
            f"from target_weight_bytes + activation_peak_bytes{drafts}, {per_token} bytes per token "
            f"from target_kv_bytes_per_token{drafts}); raise memory_utilization"
            f"{', reserve less' if mem.reserve_bytes else ''} or use a smaller model",
        )
    return KvCapacity(
        kv_tokens=blocks * block_size,
        kv_blocks=blocks,
        block_size=block_size,
        memory_utilization=memory_utilization,
        proposer=proposer,
        budget_bytes=budget,
        bytes_per_token=per_token,
        tensor_parallel_size=tp,
    )


def check_replica_shape(tensor_parallel_size: int, profile: Profile, origin: str | None) -> None:
    """One-line error when the scenario's replica shape is not the one the profile describes."""
    built = profile.replica.tensor_parallel_size
    if tensor_parallel_size != built:
        raise SpecplanError(
            f"{origin or 'scenario'}: fleet.tensor_parallel_size = {tensor_parallel_size} but profile "
            f"{profile.origin} (replica.tensor_parallel_size) was built for {built}; valid: "
            f"{built}, or a profile built for {tensor_parallel_size} GPUs per replica "
            f"(`specplan profile estimate --tensor-parallel-size {tensor_parallel_size}`)"
        )


def kv_tokens(profile: Profile, memory_utilization: float, block_size: int, proposer: str | None = None) -> int:
    """Usable KV token slots (whole blocks)."""
    return kv_capacity(profile, memory_utilization, block_size, proposer).kv_tokens


def kv_blocks(profile: Profile, memory_utilization: float, block_size: int, proposer: str | None = None) -> int:
    """Usable whole KV blocks."""
    return kv_capacity(profile, memory_utilization, block_size, proposer).kv_blocks


def _gib(n: int) -> str:
    if abs(n) >= 1024**3:
        return f"{n / 1024**3:.2f} GiB ({n} bytes)"
    return f"{n / 1024**2:.1f} MiB ({n} bytes)"
