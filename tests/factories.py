"""factory-boy factories for the domain model, shared by every test folder."""

from __future__ import annotations

from decimal import Decimal

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone

from jobs.models import Allocation, Job, JobEvent
from scheduler.models import Gpu, GpuModel, Node
from teams.models import Membership, Project, Quota, Team


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("pw-for-tests")


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team

    name = factory.Sequence(lambda n: f"Team {n}")
    slug = factory.Sequence(lambda n: f"team-{n}")
    namespace = factory.LazyAttribute(lambda o: f"ns-{o.slug}")
    weight = 1


class ProjectFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Project

    team = factory.SubFactory(TeamFactory)
    code = factory.Sequence(lambda n: f"proj-{n}")
    name = factory.LazyAttribute(lambda o: o.code.title())


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    team = factory.SubFactory(TeamFactory)
    role = Membership.Role.MEMBER


class QuotaFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Quota

    team = factory.SubFactory(TeamFactory)
    gpu_class = "any"
    guaranteed_gpus = Decimal(4)
    burst_gpus = Decimal(8)


class GpuModelFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GpuModel
        django_get_or_create = ("name",)

    name = "A100-SXM4-80GB"
    gpu_class = "A100"
    memory_mib = 81920
    mig_capable = True


class NodeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Node

    name = factory.Sequence(lambda n: f"node-{n}")
    gpu_model = factory.SubFactory(GpuModelFactory)
    gpu_count = 8
    interconnect = "nvswitch"
    leaf_switch = "leaf-1"
    spine = "spine-1"
    tier = "reserved"
    price_per_gpu_hour = Decimal("2.1000")
    zone = "zone-a"


class GpuFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Gpu

    node = factory.SubFactory(NodeFactory)
    index = factory.Sequence(lambda n: n % 8)
    mig_layout = factory.LazyFunction(list)


class JobFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Job

    team = factory.SubFactory(TeamFactory)
    name = factory.Sequence(lambda n: f"job-{n}")
    kind = "training"
    gpus = 1
    submitted_at = factory.LazyFunction(timezone.now)


class JobEventFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = JobEvent

    job = factory.SubFactory(JobFactory)
    type = "submitted"
    at = factory.LazyFunction(timezone.now)


class AllocationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Allocation

    job = factory.SubFactory(JobFactory)
    replica = 0
    node = factory.SubFactory(NodeFactory)
    gpu_index = 0
    tier = "reserved"
    price_per_gpu_hour = Decimal("2.1000")
    started_at = factory.LazyFunction(timezone.now)


def grant_production(team: Team, *kinds: str) -> Team:
    """Grant ``team`` production priority for ``kinds`` (default: inference, as an admin grants it), as a
    platform admin does (teams.grants): tests that submit or raise work to production say so explicitly."""
    team.max_priority = "production"
    team.production_kinds = list(kinds or ("inference",))
    team.save(update_fields=["max_priority", "production_kinds"])
    return team
