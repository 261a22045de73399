"""The chargeback report's shape and its arithmetic (pure: no database).

How the lines add up to the cluster's cost for a period (``Report.lines_total == Report.cluster_cost``):

- **Capacity paid** per GPU model and tier (:class:`CapacityLine.paid_cost`): on-demand and spot GPUs cost
  their catalog price for every hour their node is registered (registration to ``gone``); reserved GPUs are
  paid by the commitments for that model, and reserved GPUs beyond the committed count at the catalog's
  reserved price.
- **Cluster cost** = Σ capacity paid + commitments that went unused (committed GPU-hours above the reserved
  GPUs registered, at the commitment's price).
- **Lines**: usage (the ledger: what teams held) + idle capacity (capacity paid − usage, per model and tier)
  + unused commitments. With ``idle = shared`` the idle line is handed to the job lines in proportion to their
  usage cost (largest remainder to the micro-dollar, so the shares add up exactly); unused commitments always
  stay a line of their own: they are a purchasing decision, not anyone's use.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal

from billing.intervals import SIX_PLACES
from billing.periods import Period

ZERO = Decimal(0)


def share_pro_rata(total: Decimal, weights: list[Decimal]) -> list[Decimal]:
    """Split ``total`` (6 decimals) over ``weights`` in proportion, to 6 decimals, adding up to ``total`` exactly.

    Largest remainder: every share is floored, then the micro-units left over go one each to the largest
    remainders (ties to the earlier weight). All weights zero: nothing can be split, every share is zero.
    """
    weight_sum = sum(weights, ZERO)
    if weight_sum <= 0 or not weights:
        return [ZERO for _ in weights]
    units = int((total / SIX_PLACES).to_integral_value())
    sign = -1 if units < 0 else 1
    units = abs(units)
    exact = [Decimal(units) * w / weight_sum for w in weights]
    floors = [int(x.to_integral_value(rounding=ROUND_FLOOR)) for x in exact]
    left = units - sum(floors)
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - floors[i]), i))
    for i in order[:left]:
        floors[i] += 1
    return [Decimal(sign * f).scaleb(-6) for f in floors]


@dataclass
class JobLine:
    """One job's use of one GPU model in one tier during the period."""

    team_id: int
    team_slug: str
    team_name: str
    project_code: str
    job_id: int | None
    job_name: str
    gpu_model: str
    tier: str
    gpu_hours: Decimal
    borrowed_gpu_hours: Decimal
    cost: Decimal
    idle_share: Decimal = ZERO
    provisional: bool = False  # hours the ledger has not closed yet (billing.provisional)

    @property
    def guaranteed_gpu_hours(self) -> Decimal:
        return self.gpu_hours - self.borrowed_gpu_hours

    @property
    def total(self) -> Decimal:
        return self.cost + self.idle_share


@dataclass
class Totals:
    gpu_hours: Decimal = ZERO
    borrowed_gpu_hours: Decimal = ZERO
    cost: Decimal = ZERO
    idle_share: Decimal = ZERO

    def add(self, line: JobLine | Totals) -> None:
        self.gpu_hours += line.gpu_hours
        self.borrowed_gpu_hours += line.borrowed_gpu_hours
        self.cost += line.cost
        self.idle_share += line.idle_share

    @property
    def guaranteed_gpu_hours(self) -> Decimal:
        return self.gpu_hours - self.borrowed_gpu_hours

    @property
    def total(self) -> Decimal:
        return self.cost + self.idle_share


@dataclass
class SummaryRow(Totals):
    """One row per team / project / GPU model / tier: the chargeback file's grain."""

    team_slug: str = ""
    team_name: str = ""
    project_code: str = ""
    gpu_model: str = ""
    tier: str = ""
    provisional: bool = False


@dataclass
class ProjectLine(Totals):
    code: str = ""
    jobs: list[JobLine] = field(default_factory=list)


@dataclass
class TeamLine(Totals):
    team_id: int = 0
    slug: str = ""
    name: str = ""
    projects: list[ProjectLine] = field(default_factory=list)
    lost_gpu_hours: Decimal = ZERO
    lost_cost: Decimal = ZERO
    total_cents: Decimal | None = None  # the total as the files show it (billing.cents), once apportioned


@dataclass
class CapacityLine:
    """What one GPU model in one tier offered and cost, and how much of it the ledger says was used."""

    gpu_model: str
    tier: str
    capacity_gpu_hours: Decimal
    paid_cost: Decimal
    used_gpu_hours: Decimal = ZERO
    used_cost: Decimal = ZERO

    @property
    def idle_gpu_hours(self) -> Decimal:
        return self.capacity_gpu_hours - self.used_gpu_hours

    @property
    def idle_cost(self) -> Decimal:
        return self.paid_cost - self.used_cost

    @property
    def utilization(self) -> float | None:
        return float(self.used_gpu_hours / self.capacity_gpu_hours) if self.capacity_gpu_hours else None


@dataclass
class CommitmentLine:
    """Reserved commitments for one GPU model over the period, against the reserved GPUs registered."""

    gpu_model: str
    committed_gpu_hours: Decimal
    reserved_gpu_hours: Decimal
    cost: Decimal

    @property
    def unused_gpu_hours(self) -> Decimal:
        return max(ZERO, self.committed_gpu_hours - self.reserved_gpu_hours)

    @property
    def unused_cost(self) -> Decimal:
        if not self.committed_gpu_hours:
            return ZERO
        return (self.cost * self.unused_gpu_hours / self.committed_gpu_hours).quantize(SIX_PLACES)


@dataclass
class Report:
    period: Period
    mode: str  # "chargeback" | "showback"
    idle_mode: str  # "own-line" | "shared" (the setting)
    scope_all: bool  # False: a team lead's view, only their teams' lines
    job_lines: list[JobLine]
    capacity: list[CapacityLine]
    commitments: list[CommitmentLine]
    idle_shared: bool  # the idle line was handed to the job lines
    closed_through: object  # datetime | None: the last ledger interval end in the period
    lost_gpu_hours: Decimal = ZERO
    lost_cost: Decimal = ZERO
    lost_by_team: dict[int, tuple[Decimal, Decimal]] = field(default_factory=dict)  # team id → (GPU-h, cost)
    # Autoscaled nodes' hours from their request to their first work, charged to the team that asked
    # (billing.on_demand): a figure beside the lines, which hold them as idle capacity.
    overhead_gpu_hours: Decimal = ZERO
    overhead_cost: Decimal = ZERO
    overhead_by_team: dict[int, tuple[Decimal, Decimal]] = field(default_factory=dict)  # team id → (GPU-h, cost)
    # Team id → (slug, name) of each team in ``overhead_by_team``: the files name a team whose only figure of the
    # period is its overhead (its job never ran there) as they name the others.
    overhead_teams: dict[int, tuple[str, str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    # -- the month's standing ----------------------------------------------------------------------------

    @property
    def final(self) -> bool:
        """The month is over and the ledger has closed every hour of it: these figures will not change."""
        return self.period.complete and not any(line.provisional for line in self.job_lines)

    @property
    def status(self) -> str:
        """``final`` (:attr:`final`) or ``provisional``: a month still running, or one whose last hours the ledger
        has not closed yet (they are priced, and included, as provisional lines)."""
        return "final" if self.final else "provisional"

    # -- the lines ---------------------------------------------------------------------------------------

    @property
    def usage_total(self) -> Decimal:
        return sum((line.cost for line in self.job_lines), ZERO)

    @property
    def provisional_total(self) -> Decimal:
        """Usage of the hours not closed yet (included in the usage and every total)."""
        return sum((line.cost for line in self.job_lines if line.provisional), ZERO)

    @property
    def provisional_gpu_hours(self) -> Decimal:
        return sum((line.gpu_hours for line in self.job_lines if line.provisional), ZERO)

    @property
    def idle_total(self) -> Decimal:
        return sum((line.idle_cost for line in self.capacity), ZERO)

    @property
    def idle_share_total(self) -> Decimal:
        return sum((line.idle_share for line in self.job_lines), ZERO)

    @property
    def teams_total(self) -> Decimal:
        """What the teams' lines add up to: usage plus any idle share."""
        return self.usage_total + self.idle_share_total

    @property
    def idle_line(self) -> Decimal:
        """The idle capacity line as shown: all of it, or nothing when it was shared back."""
        return ZERO if self.idle_shared else self.idle_total

    @property
    def unused_commitment_total(self) -> Decimal:
        return sum((line.unused_cost for line in self.commitments), ZERO)

    @property
    def lines_total(self) -> Decimal:
        """What the report's lines add up to: for finance, equal to :attr:`cluster_cost`."""
        total = self.usage_total + self.idle_share_total
        if self.scope_all:
            total += self.idle_line + self.unused_commitment_total
        return total

    @property
    def cluster_cost(self) -> Decimal:
        return sum((line.paid_cost for line in self.capacity), ZERO) + self.unused_commitment_total

    @property
    def reconciled(self) -> bool:
        return self.lines_total == self.cluster_cost

    # -- groupings ---------------------------------------------------------------------------------------

    def rows(self) -> list[SummaryRow]:
        """One row per team / project / GPU model / tier, sorted."""
        rows: dict[tuple[str, str, str, str, bool], SummaryRow] = {}
        for line in self.job_lines:
            key = (line.team_slug, line.project_code, line.gpu_model, line.tier, line.provisional)
            row = rows.get(key)
            if row is None:
                row = rows[key] = SummaryRow(
                    team_slug=line.team_slug,
                    team_name=line.team_name,
                    project_code=line.project_code,
                    gpu_model=line.gpu_model,
                    tier=line.tier,
                    provisional=line.provisional,
                )
            row.add(line)
        return [rows[key] for key in sorted(rows)]

    def teams(self) -> list[TeamLine]:
        """Team → project → job, each level with its totals; largest cost first."""
        teams: dict[int, TeamLine] = {}
        projects: dict[tuple[int, str], ProjectLine] = {}
        for line in self.job_lines:
            team = teams.get(line.team_id)
            if team is None:
                team = teams[line.team_id] = TeamLine(team_id=line.team_id, slug=line.team_slug, name=line.team_name)
            project = projects.get((line.team_id, line.project_code))
            if project is None:
                project = projects[(line.team_id, line.project_code)] = ProjectLine(code=line.project_code)
                team.projects.append(project)
            project.jobs.append(line)
            project.add(line)
            team.add(line)
        for team in teams.values():
            team.lost_gpu_hours, team.lost_cost = self.lost_by_team.get(team.team_id, (ZERO, ZERO))
            team.projects.sort(key=lambda p: (-p.total, p.code))
            for project in team.projects:
                project.jobs.sort(key=lambda j: (-j.total, j.job_name, j.gpu_model, j.tier, j.provisional))
        return sorted(teams.values(), key=lambda t: (-t.total, t.slug))

    def by_tier(self) -> dict[str, Totals]:
        tiers: dict[str, Totals] = {}
        for line in self.job_lines:
            tiers.setdefault(line.tier, Totals()).add(line)
        return dict(sorted(tiers.items()))


def share_idle(lines: list[JobLine], idle_total: Decimal) -> bool:
    """Hand ``idle_total`` to ``lines`` in proportion to their usage cost; False when there is no usage."""
    shares = share_pro_rata(idle_total, [line.cost for line in lines])
    if not lines or not any(line.cost for line in lines):
        return False
    for line, share in zip(lines, shares, strict=True):
        line.idle_share = share
    return True


def attach_usage(capacity: Iterable[CapacityLine], lines: Iterable[JobLine]) -> list[CapacityLine]:
    """Add the ledger's usage to the capacity lines, creating a zero-capacity line for usage without one."""
    by_key = {(line.gpu_model, line.tier): line for line in capacity}
    for job in lines:
        line = by_key.get((job.gpu_model, job.tier))
        if line is None:
            line = by_key[(job.gpu_model, job.tier)] = CapacityLine(job.gpu_model, job.tier, ZERO, ZERO)
        line.used_gpu_hours += job.gpu_hours
        line.used_cost += job.cost
    return [by_key[key] for key in sorted(by_key)]
