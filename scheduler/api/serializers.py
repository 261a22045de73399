"""What the cluster API answers: every node and GPU, who holds each slice (by team) and the free capacity."""

from __future__ import annotations

from rest_framework import serializers


class HolderSerializer(serializers.Serializer):
    team = serializers.CharField(source="team_slug")
    job = serializers.IntegerField(source="job_id", allow_null=True)
    job_name = serializers.CharField()


class SegmentSerializer(serializers.Serializer):
    start = serializers.IntegerField(help_text="First memory slice (0–7)")
    width = serializers.IntegerField(help_text="Memory slices")
    label = serializers.CharField()  # type: ignore[assignment]  # a declared field, not Field.label
    compute_slices = serializers.IntegerField()
    partitioned = serializers.BooleanField()
    holder = HolderSerializer(allow_null=True)


class GpuCellSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    mig = serializers.BooleanField()
    segments = SegmentSerializer(many=True)


class NodeRowSerializer(serializers.Serializer):
    name = serializers.CharField()
    gpu_model = serializers.CharField()
    gpu_class = serializers.CharField()
    tier = serializers.CharField()
    state = serializers.CharField()
    price_per_gpu_hour = serializers.FloatField()
    free_gpus = serializers.FloatField()
    gpus = GpuCellSerializer(many=True)


class FreeCapacitySerializer(serializers.Serializer):
    gpu_class = serializers.CharField()
    tier = serializers.CharField()
    total_gpus = serializers.FloatField()
    free_gpus = serializers.FloatField()


class ClusterSerializer(serializers.Serializer):
    total_gpus = serializers.IntegerField()
    free_gpus = serializers.FloatField()
    free = FreeCapacitySerializer(many=True)
    nodes = NodeRowSerializer(many=True)
