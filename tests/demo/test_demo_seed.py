"""The demo seed: a complete, idempotent org and fleet, and a command that tells people how to sign in."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.db.models import Model

from demo.seed import DEMO_PASSWORD, DEMO_POOL, demo_org, demo_seed, price_per_gpu_hour
from scheduler.autoscaled import AutoscaledPool
from scheduler.core.gpus.catalog import validate_layout
from scheduler.models import Gpu, GpuModel, Node
from teams.models import Membership, Project, Quota, Team
from teams.orgfile import validate_org
from teams.roles import FINANCE, PLATFORM_ADMIN

pytestmark = pytest.mark.django_db

User = get_user_model()
SEEDED_MODELS: tuple[type[Model], ...] = (
    Team,
    Project,
    Quota,
    Membership,
    User,
    Node,
    Gpu,
    GpuModel,
    Group,
    AutoscaledPool,
)


def _counts() -> dict[str, int]:
    return {model.__name__: model.objects.count() for model in SEEDED_MODELS}


@pytest.fixture
def seeded():
    return demo_seed(history=False)


def test_seeding_twice_changes_no_row_count(seeded):
    first = _counts()
    second_result = demo_seed(history=False)
    assert _counts() == first
    assert (second_result.teams, second_result.users, second_result.nodes, second_result.gpus) == (
        seeded.teams,
        seeded.users,
        seeded.nodes,
        seeded.gpus,
    )
    assert second_result.users_created == ()


def test_seeding_twice_changes_no_row(seeded):
    def rows() -> list[tuple[object, ...]]:
        return [
            *Node.objects.values_list("name", "tier", "price_per_gpu_hour", "labels", "updated_at"),
            *Gpu.objects.values_list("node__name", "index", "mig_layout"),
            *Quota.objects.values_list("team__slug", "gpu_class", "guaranteed_gpus", "burst_gpus"),
        ]

    before = rows()
    demo_seed(history=False)
    assert rows() == before


def test_result_reports_counts_and_logins(seeded):
    assert (seeded.teams, seeded.users, seeded.nodes, seeded.gpus) == (
        Team.objects.count(),
        User.objects.count(),
        Node.objects.count(),
        Gpu.objects.count(),
    )
    usernames = [login.username for login in seeded.logins]
    assert usernames[:2] == ["admin", "finance"]
    assert {"nlp-lead", "nlp-member", "vision-lead", "vision-member", "speech-lead", "speech-member"} <= set(usernames)
    assert set(seeded.users_created) == set(usernames)


def test_org_has_teams_projects_and_sensible_quotas(seeded):
    teams = {t.slug: t for t in Team.objects.all()}
    assert len(teams) >= 3
    assert teams["nlp"].name == "Language Models"
    assert teams["vision"].name == "Computer Vision"
    assert teams["speech"].name == "Speech & Audio"
    for team in teams.values():
        assert team.namespace == f"team-{team.slug}"
        assert 2 <= team.projects.count() <= 3
        assert team.quotas.filter(gpu_class="any").exists()
        for quota in team.quotas.all():
            assert 0 < quota.guaranteed_gpus <= quota.burst_gpus
    # Guarantees must fit the GPUs that exist, class by class.
    gpus_by_class = {cls: Gpu.objects.filter(node__gpu_model__gpu_class=cls).count() for cls in ("A100", "H100")} | {
        "any": Gpu.objects.count()
    }
    for cls, capacity in gpus_by_class.items():
        guaranteed = sum(q.guaranteed_gpus for q in Quota.objects.filter(gpu_class=cls))
        assert 0 < guaranteed <= capacity


def test_only_the_serving_team_is_granted_production_and_for_inference_only(seeded):
    grants = {t.slug: (t.max_priority, t.production_kinds) for t in Team.objects.all()}
    assert grants == {
        "nlp": ("production", ["inference"]),  # the opening's chat-serving-70b and the feed's chat-serving
        "vision": ("high", ["inference"]),
        "speech": ("high", ["inference"]),
    }


def test_org_roles(seeded):
    admin = User.objects.get(username="admin")
    assert admin.is_staff and admin.is_superuser
    assert admin.groups.filter(name=PLATFORM_ADMIN).exists()
    finance = User.objects.get(username="finance")
    assert finance.groups.filter(name=FINANCE).exists()
    assert not finance.is_staff
    for team in Team.objects.all():
        roles = dict(Membership.objects.filter(team=team).values_list("user__username", "role"))
        assert roles == {f"{team.slug}-lead": "lead", f"{team.slug}-member": "member"}


def test_every_demo_user_signs_in_with_demo(seeded):
    for login in seeded.logins:
        assert User.objects.get(username=login.username).check_password(DEMO_PASSWORD), login.username


def test_a_changed_password_survives_a_reseed(seeded):
    user = User.objects.get(username="nlp-lead")
    user.set_password("my-own-secret-42")
    user.save()
    result = demo_seed(history=False)
    user.refresh_from_db()
    assert user.check_password("my-own-secret-42")
    assert not user.check_password(DEMO_PASSWORD)
    assert result.users_created == ()


def test_a_deleted_demo_user_comes_back_with_the_demo_password(seeded):
    User.objects.filter(username="speech-member").delete()
    result = demo_seed(history=False)
    assert result.users_created == ("speech-member",)
    assert User.objects.get(username="speech-member").check_password(DEMO_PASSWORD)
    assert Membership.objects.filter(user__username="speech-member", team__slug="speech", role="member").exists()


def test_fleet_shape(seeded):
    nodes = Node.objects.select_related("gpu_model")
    assert Gpu.objects.count() >= 64
    assert {n.leaf_switch for n in nodes} == {"leaf-1", "leaf-2"}
    assert {n.spine for n in nodes} == {"spine-1"}
    assert {n.tier for n in nodes} == {"reserved", "on-demand", "spot"}
    assert {n.gpu_model.name for n in nodes} == {"A100-SXM4-80GB", "H100-SXM5-80GB", "A100-PCIE-40GB"}
    assert len({n.zone for n in nodes}) >= 2
    assert GpuModel.objects.count() == 8  # the whole catalog, not only the models in use
    for node in nodes:
        assert node.gpus.count() == node.gpu_count
        expected = {"A100-PCIE-40GB": (4, "nvlink-pairs")}.get(node.gpu_model.name, (8, "nvswitch"))
        assert (node.gpu_count, node.interconnect) == expected, node.name
        assert node.price_per_gpu_hour == price_per_gpu_hour(gpu_model=node.gpu_model.name, tier=node.tier)


def test_fleet_has_legal_mig_layouts_on_each_mig_model(seeded):
    mig = Gpu.objects.exclude(mig_layout=[]).select_related("node__gpu_model")
    assert {g.node.gpu_model.name for g in mig} == {"A100-SXM4-80GB", "H100-SXM5-80GB", "A100-PCIE-40GB"}
    for gpu in mig:
        validate_layout(gpu.node.gpu_model.name, gpu.mig_layout)
    assert 0 < mig.count() < Gpu.objects.count() // 4  # "a few": most GPUs stay whole for training


def test_prices_follow_the_facts_sheet():
    # docs/gpu-facts.md, Prices (AWS us-east-1): on-demand "now"; spot midpoint of the AZ range; reserved 35% off
    # on-demand.
    assert str(price_per_gpu_hour(gpu_model="H100-SXM5-80GB", tier="on-demand")) == "6.8800"
    assert str(price_per_gpu_hour(gpu_model="H100-SXM5-80GB", tier="spot")) == "2.7100"
    assert str(price_per_gpu_hour(gpu_model="H100-SXM5-80GB", tier="reserved")) == "4.4720"
    assert str(price_per_gpu_hour(gpu_model="A100-SXM4-80GB", tier="on-demand")) == "3.4300"
    assert str(price_per_gpu_hour(gpu_model="A100-SXM4-80GB", tier="spot")) == "1.1650"
    assert str(price_per_gpu_hour(gpu_model="A100-PCIE-40GB", tier="on-demand")) == "2.7400"
    assert str(price_per_gpu_hour(gpu_model="A100-PCIE-40GB", tier="spot")) == "0.6650"


def test_node_labels_match_the_rows(seeded):
    for node in Node.objects.select_related("gpu_model"):
        labels = node.labels
        assert labels["kubernetes.io/hostname"] == node.name
        assert labels["karpenter.sh/capacity-type"] == node.tier
        assert labels["topology.kubernetes.io/zone"] == node.zone
        assert labels["nvidia.com/gpu.count"] == str(node.gpu_count)
        assert labels["nvidia.com/mig.capable"] == "true"
        assert labels["nvidia.com/gpu.product"].startswith("NVIDIA-")
        mig_profiles = [p for g in node.gpus.all() for p, _ in g.mig_layout]
        mig_counts = {k: v for k, v in labels.items() if k.startswith("nvidia.com/mig-")}
        assert sum(int(v) for v in mig_counts.values()) == len(mig_profiles)
        assert (labels["nvidia.com/mig.config"] == "all-disabled") == (not mig_profiles)


def test_demo_org_is_a_valid_org_file():
    spec = validate_org(demo_org())
    assert spec.platform_admins == ("admin",)
    assert spec.finance == ("finance",)
    assert [t.slug for t in spec.teams or ()] == ["nlp", "vision", "speech"]


def test_command_prints_the_banner_url_logins_and_counts(settings):
    settings.DEBUG = True
    out = StringIO()
    call_command("demo", "seed", "--no-history", stdout=out)
    text = out.getvalue()
    assert "DEMO" in text
    assert 'password "demo"' in text
    assert "production" in text
    assert "http://127.0.0.1:8000/" in text
    for username in ("admin", "finance", "nlp-lead", "nlp-member", "vision-lead", "speech-member"):
        assert username in text
    assert "Language Models" in text
    assert f"{Gpu.objects.count()} GPUs" in text


def test_command_takes_the_url(settings):
    settings.DEBUG = True
    out = StringIO()
    call_command("demo", "seed", "--no-history", "--url", "http://0.0.0.0:9000/", stdout=out)
    assert "http://0.0.0.0:9000/" in out.getvalue()


def test_command_refuses_without_debug(settings):
    settings.DEBUG = False
    with pytest.raises(CommandError, match="DEBUG"):
        call_command("demo", "seed", stdout=StringIO())
    assert not User.objects.exists()


def test_command_needs_an_action():
    with pytest.raises(CommandError):
        call_command("demo", stdout=StringIO())


def test_nlp_lead_signs_in_and_sees_the_team(client, seeded):
    response = client.post("/accounts/login/", {"username": "nlp-lead", "password": DEMO_PASSWORD})
    assert response.status_code == 302
    home = client.get("/", follow=True)
    assert home.status_code == 200 and home.redirect_chain == [("/teams/nlp/", 302)]
    assert "Language Models" in home.content.decode()
    assert "Computer Vision" not in home.content.decode()  # a lead sees their own team, not the others


def test_the_reserved_training_boxes_have_efa_in_one_placement_group(seeded):
    efa = Node.objects.filter(fabric="efa")
    assert sorted(efa.values_list("name", flat=True)) == [
        "a100-sxm80-res-01",
        "a100-sxm80-res-02",
        "h100-sxm80-res-01",
        "h100-sxm80-res-02",
    ]
    assert {n.fabric_devices for n in efa if n.gpu_model.name.startswith("H100")} == {32}
    assert set(efa.values_list("placement_group", flat=True)) == {"pg-training-1"}
    others = Node.objects.exclude(fabric="efa")
    assert set(others.values_list("fabric", "fabric_devices", "placement_group")) == {("tcp", 0, "")}


def test_the_demo_has_one_small_autoscaled_pool_of_the_simulated_cloud(seeded):
    (pool,) = AutoscaledPool.objects.all()
    assert (pool.name, pool.autoscaler, pool.gpu_model.name, pool.gpus_per_node, pool.max_nodes, pool.enabled) == (
        DEMO_POOL,
        "simulated",
        "H100-SXM5-80GB",
        8,
        2,
        True,
    )
    pool.full_clean()
