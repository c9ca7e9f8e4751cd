"""Stragglers: which rank makes every step slow, and why (torch-free: rank 0's arithmetic on gathered figures).

Every log interval each rank's mean step splits into three parts: waiting for its batch (data), waiting in
DDP's gradient all-reduces (communication: from each bucket's launch to its completion, timed by a comm hook),
and the rest (compute: forward, backward, the optimizer, logging). The ranks of a DDP job finish their steps
together, so the step time alone names nobody: a slow rank shows as more data or compute time, and the others
as more communication, spent waiting for it. Rank 0 compares each rank's own work (data + compute) with the
median over ranks; a rank above `log.straggler_ratio` x the median for `log.straggler_intervals` intervals in
a row is named once, with its host and the part that grew most.
"""

import statistics
from dataclasses import dataclass, field

PARTS = ("data", "compute", "communication")


@dataclass
class Stragglers:
    hosts: list[str]  # by rank
    ratio: float
    intervals: int
    streak: list[int] = field(default_factory=list)
    named: list[dict[str, object]] = field(default_factory=list)  # for summary.json

    def __post_init__(self) -> None:
        self.streak = [0] * len(self.hosts)

    def observe(self, step: int, per_rank: list[tuple[float, float, float]]) -> tuple[dict[str, float], list[str]]:
        """One interval's (data, compute, communication) seconds per step of every rank: the scalars for
        TensorBoard, and a warning line for each rank that has just become a straggler."""
        totals = [sum(parts) for parts in per_rank]
        own = [data + compute for data, compute, _ in per_rank]
        typical = statistics.median(own)
        slowest = max(range(len(own)), key=own.__getitem__)
        scalars = {
            "perf/step_time_min": min(totals),
            "perf/step_time_median": statistics.median(totals),
            "perf/step_time_max": max(totals),
            "perf/slowest_rank": float(slowest),
            "perf/slowest_ratio": own[slowest] / typical if typical > 0 else 1.0,
        }
        warnings = []
        already = {entry["rank"] for entry in self.named}
        for rank, work in enumerate(own):
            self.streak[rank] = self.streak[rank] + 1 if typical > 0 and work > self.ratio * typical else 0
            if self.streak[rank] >= self.intervals and rank not in already:
                medians = [statistics.median(parts[i] for parts in per_rank) for i in range(len(PARTS))]
                grew = max(range(len(PARTS)), key=lambda i: per_rank[rank][i] - medians[i])
                entry = {"rank": rank, "host": self.hosts[rank], "why": PARTS[grew], "ratio": round(work / typical, 3)}
                self.named.append(entry | {"step": step})
                warnings.append(
                    f"rank {rank} on {self.hosts[rank]} is a straggler: its own work per step (data + compute) was "
                    f"{work / typical:.2f}x the median for {self.intervals} log intervals up to step {step}, mostly "
                    f"{PARTS[grew]} ({per_rank[rank][grew]:.3g} s per step against a median of {medians[grew]:.3g} s)"
                )
        return scalars, warnings
