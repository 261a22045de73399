"""Admin for tenants: teams with their projects, members and quotas, and users with their teams."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.db.models import QuerySet
from django.http import HttpRequest

from scheduler.core.model.vocabulary import Priority
from teams.grants import JOB_KINDS, kinds_normalized
from teams.models import Membership, Project, Quota, SsoGroup, Team


class ProjectInline(admin.TabularInline):
    model = Project
    fields = ("code", "name")
    extra = 0


class MembershipInline(admin.TabularInline):
    """A team's members, seen from the team page."""

    model = Membership
    fields = ("user", "role", "source")
    readonly_fields = ("source",)  # what an admin grants is by hand; single sign-on keeps its own (teams/sso.py)
    # Users are the largest table here; a select of every user would make the team page unusable.
    autocomplete_fields = ("user",)
    extra = 0

    def get_queryset(self, request: HttpRequest) -> QuerySet[Membership]:
        return super().get_queryset(request).select_related("user", "team")


class QuotaInline(admin.TabularInline):
    model = Quota
    fields = ("gpu_class", "guaranteed_gpus", "burst_gpus")
    extra = 0


class TeamAdminForm(forms.ModelForm):
    """The team's production kinds as checkboxes, not the JSON list they are stored as."""

    production_kinds = forms.MultipleChoiceField(
        label="Production for",
        choices=[(kind, kind) for kind in JOB_KINDS],
        widget=forms.CheckboxSelectMultiple,
        help_text=Team._meta.get_field("production_kinds").help_text,
    )

    class Meta:
        model = Team
        fields = (
            "name",
            "slug",
            "namespace",
            "weight",
            "checkpoint_claim",
            "max_priority",
            "production_kinds",
            "on_demand_gpu_hours_per_day",
        )

    def clean_production_kinds(self) -> list[str]:
        return kinds_normalized(self.cleaned_data["production_kinds"])


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    form = TeamAdminForm
    list_display = ("name", "slug", "namespace", "weight", "max_priority", "production_for", "created_at")
    list_filter = ("max_priority",)
    search_fields = ("name", "slug", "namespace")
    ordering = ("name",)
    prepopulated_fields = {"slug": ("name",)}
    fieldsets = (
        (None, {"fields": ("name", "slug", "namespace", "weight", "checkpoint_claim")}),
        (
            # The grant is the admin's decision (teams.grants); leads see the result, never this form.
            "Priority grant: production preempts other teams' work, so it is granted here, not self-served",
            {"fields": ("max_priority", "production_kinds")},
        ),
        # On-demand capacity for peaks is paid for while it stands: the admin bounds what a team's jobs may ask for.
        ("On-demand budget", {"fields": ("on_demand_gpu_hours_per_day",)}),
    )
    inlines = (ProjectInline, MembershipInline, QuotaInline)

    @admin.display(description="production for")
    def production_for(self, obj: Team) -> str:
        return ", ".join(obj.production_kinds or []) if obj.max_priority == Priority.PRODUCTION else "—"


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ("code", "name", "team")
    list_filter = ("team",)
    search_fields = ("code", "name", "team__slug", "team__name")
    ordering = ("team__name", "code")
    # Project.__str__ reads team.slug, so every row needs its team.
    list_select_related = ("team",)


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "team", "role", "source")
    list_filter = ("role", "source", "team")
    search_fields = ("user__username", "user__email", "team__slug", "team__name")
    ordering = ("team__name", "user__username")
    list_select_related = ("user", "team")
    autocomplete_fields = ("user", "team")
    # Granted here means by hand. A single sign-on membership changed here is recomputed at the user's next
    # sign-in; delete a hand-granted one to leave the person's access to their groups.
    readonly_fields = ("source",)


@admin.register(SsoGroup)
class SsoGroupAdmin(admin.ModelAdmin):
    """The identity provider's groups and the roles they give; kept in the org file (``sso_groups``)."""

    list_display = ("group", "team", "role")
    list_filter = ("role", "team")
    search_fields = ("group", "team__slug", "team__name")
    list_select_related = ("team",)


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    """Burst below guarantee is rejected by the model's check constraint, which the form validates."""

    list_display = ("team", "gpu_class", "guaranteed_gpus", "burst_gpus")
    list_filter = ("gpu_class", "team")
    search_fields = ("team__slug", "team__name")
    ordering = ("team__name", "gpu_class")
    list_select_related = ("team",)


class UserMembershipInline(admin.TabularInline):
    """A user's teams, seen from the user page: where an admin puts a person into a team."""

    model = Membership
    fk_name = "user"
    fields = ("team", "role", "source")
    readonly_fields = ("source",)
    autocomplete_fields = ("team",)
    extra = 0
    verbose_name = "team membership"
    verbose_name_plural = "team memberships"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Membership]:
        return super().get_queryset(request).select_related("team", "user")


User = get_user_model()

# django.contrib.auth registers its UserAdmin first (it precedes teams in INSTALLED_APPS); replace it with one
# that also shows the user's teams.
if admin.site.is_registered(User):
    admin.site.unregister(User)


@admin.register(User)
class MicrocosmUserAdmin(UserAdmin):
    inlines = (*UserAdmin.inlines, UserMembershipInline)
