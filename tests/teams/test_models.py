"""Team, Project, Membership and Quota: validation messages and database constraints."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from teams.models import Membership, Quota, Team
from tests.factories import MembershipFactory, ProjectFactory, QuotaFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("namespace", ["Team-NLP", "-nlp", "nlp-", "nlp_team", "n" * 64, "team.nlp"])
def test_namespace_must_be_a_dns1123_label(namespace: str) -> None:
    team = Team(name="NLP", slug="nlp", namespace=namespace)
    with pytest.raises(ValidationError) as caught:
        team.full_clean()
    assert "is not a valid Kubernetes namespace" in str(caught.value.message_dict["namespace"])


@pytest.mark.parametrize("namespace", ["team-nlp", "nlp", "a", "n" * 63, "0x1"])
def test_valid_namespaces_pass(namespace: str) -> None:
    Team(name="NLP", slug="nlp", namespace=namespace).full_clean()


@pytest.mark.parametrize("claim", ["Scratch", "-scratch", "scratch-", "scratch_ckpt", "a/b", "x" * 254, "a..b"])
def test_checkpoint_claim_must_be_a_kubernetes_name(claim: str) -> None:
    team = Team(name="NLP", slug="nlp", namespace="team-nlp", checkpoint_claim=claim)
    with pytest.raises(ValidationError) as caught:
        team.full_clean()
    assert "is not a valid volume claim name" in str(caught.value.message_dict["checkpoint_claim"])


@pytest.mark.parametrize("claim", ["", "scratch", "nlp-ckpt.v2", "x" * 253])
def test_valid_checkpoint_claims_pass_and_empty_means_microcosm_s_own(claim: str) -> None:
    Team(name="NLP", slug="nlp", namespace="team-nlp", checkpoint_claim=claim).full_clean()
    assert Team.objects.create(name="CV", slug="cv", namespace="team-cv").checkpoint_claim == ""


@pytest.mark.parametrize("slug", ["NLP", "nlp--x", "nlp_x", "-nlp", ""])
def test_slug_is_validated(slug: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Team(name="NLP", slug=slug, namespace="team-nlp").full_clean()
    assert "slug" in caught.value.message_dict


def test_namespace_is_unique_in_the_database() -> None:
    TeamFactory(namespace="team-shared")
    with pytest.raises(IntegrityError), transaction.atomic():
        TeamFactory(namespace="team-shared")


def test_team_weight_must_be_positive_in_the_database() -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        TeamFactory(weight=0)


def test_project_code_unique_per_team_but_reusable_across_teams() -> None:
    project = ProjectFactory(code="chat")
    ProjectFactory(code="chat")  # another team
    with pytest.raises(IntegrityError), transaction.atomic():
        ProjectFactory(team=project.team, code="chat")


def test_project_code_is_validated() -> None:
    project = ProjectFactory.build(team=TeamFactory(), code="bad code!")
    with pytest.raises(ValidationError) as caught:
        project.full_clean()
    assert "is not a valid chargeback code" in str(caught.value.message_dict["code"])


def test_one_membership_per_user_and_team() -> None:
    membership = MembershipFactory()
    with pytest.raises(IntegrityError), transaction.atomic():
        Membership.objects.create(user=membership.user, team=membership.team, role="lead")


def test_membership_role_is_constrained_in_the_database() -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        Membership.objects.create(user=UserFactory(), team=TeamFactory(), role="owner")


def test_quota_burst_below_guarantee_is_refused_with_a_message() -> None:
    quota = Quota(team=TeamFactory(), gpu_class="H100", guaranteed_gpus=Decimal(8), burst_gpus=Decimal(4))
    with pytest.raises(ValidationError) as caught:
        quota.full_clean()
    assert "Burst must be at least the guaranteed GPUs." in str(caught.value)


def test_quota_burst_below_guarantee_is_refused_by_the_database() -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        QuotaFactory(guaranteed_gpus=Decimal(8), burst_gpus=Decimal(4))


def test_quota_gpu_class_must_be_known() -> None:
    quota = Quota(team=TeamFactory(), gpu_class="V100", guaranteed_gpus=Decimal(1), burst_gpus=Decimal(1))
    with pytest.raises(ValidationError) as caught:
        quota.full_clean()
    assert "gpu_class" in caught.value.message_dict
    with pytest.raises(IntegrityError), transaction.atomic():
        quota.save()


def test_one_quota_per_team_and_class() -> None:
    quota = QuotaFactory(gpu_class="A100")
    with pytest.raises(IntegrityError), transaction.atomic():
        QuotaFactory(team=quota.team, gpu_class="A100")


def test_fractional_quota_is_kept_exactly() -> None:
    quota = QuotaFactory(guaranteed_gpus=Decimal("0.429"), burst_gpus=Decimal("1.5"))
    quota.refresh_from_db()
    assert quota.guaranteed_gpus == Decimal("0.429")
