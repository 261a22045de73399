"""What the teams API answers: a team and the reader's role in it, its dashboard and its utilization series."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from jobs.api.serializers import JobEventSerializer


class TeamSerializer(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    namespace = serializers.CharField()
    weight = serializers.IntegerField()
    role = serializers.CharField(help_text="lead, member or admin")


class QuotaUseSerializer(serializers.Serializer):
    gpu_class = serializers.CharField()
    guaranteed_gpus = serializers.FloatField(
        allow_null=True, help_text="As the scheduler reads the quotas; null: bounded by the any row alone"
    )
    burst_gpus = serializers.FloatField(allow_null=True, help_text="null: no burst limit")
    in_use_gpus = serializers.FloatField()
    production_gpus = serializers.FloatField(help_text="Held by production work that is not preemptible")
    other_non_preemptible_gpus = serializers.FloatField()
    preemptible_gpus = serializers.FloatField()
    production_above_gpus = serializers.FloatField(help_text="Production above the guarantee, within the burst limit")
    other_non_preemptible_above_gpus = serializers.FloatField()
    borrowed_gpus = serializers.FloatField(help_text="Preemptible work above the guarantee: other teams may reclaim it")


class DashboardSerializer(serializers.Serializer):
    team = serializers.CharField(source="team.slug")
    quotas = QuotaUseSerializer(many=True)
    running_jobs = serializers.IntegerField()
    pending_jobs = serializers.IntegerField()
    month_start = serializers.DateTimeField()
    gpu_hours_this_month = serializers.FloatField(source="month.gpu_hours")
    cost_this_month = serializers.DecimalField(source="month.cost", max_digits=14, decimal_places=2)
    recent_events = serializers.SerializerMethodField()

    def get_recent_events(self, data: Any) -> list[dict[str, Any]]:
        return [{"job": e.job_id, "job_name": e.job.name, **JobEventSerializer(e).data} for e in data.recent_events]


class ClassSeriesSerializer(serializers.Serializer):
    gpu_class = serializers.CharField()
    times = serializers.ListField(child=serializers.DateTimeField())
    allocated_gpus = serializers.ListField(child=serializers.FloatField())
    used_gpus = serializers.ListField(child=serializers.FloatField(allow_null=True))
