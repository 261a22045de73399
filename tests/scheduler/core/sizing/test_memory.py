"""The memory-profile estimator: each formula of scheduler/core/sizing/memory.py checked by hand."""

from __future__ import annotations

import math

import pytest

from scheduler.core.model.snapshot import ModelProfile
from scheduler.core.model.vocabulary import Dtype, JobKind, ModelMode
from scheduler.core.sizing.memory import (
    BYTES_PER_PARAM,
    MemoryEstimate,
    TransformerShape,
    estimate,
    estimate_inference,
    estimate_training,
    kv_cache_bytes_per_value,
    memory_model_conflict,
    memory_model_for,
    transformer_shape,
)

MIB = 1 << 20


@pytest.mark.parametrize(
    ("dtype", "bytes_per_param", "kv_bytes"),
    [
        (Dtype.BF16, 2.0, 2),
        (Dtype.FP16, 2.0, 2),
        (Dtype.FP8, 1.0, 1),
        (Dtype.INT8, 1.0, 2),  # weight-only quantisation keeps a 16-bit cache
        (Dtype.INT4, 0.5, 2),
    ],
)
def test_bytes_per_parameter_and_per_cached_value(dtype: Dtype, bytes_per_param: float, kv_bytes: int) -> None:
    assert BYTES_PER_PARAM[dtype] == bytes_per_param
    assert kv_cache_bytes_per_value(dtype) == kv_bytes


@pytest.mark.parametrize(
    ("params_b", "shape"),
    [
        (7, TransformerShape(33, 4224)),  # Llama-2 7B is 32 × 4096: rounding up only overstates
        (13, TransformerShape(41, 5248)),
        (70, TransformerShape(71, 9088)),
        (173.9, TransformerShape(96, 12288)),  # GPT-3: 96 × 12288, and 12 · 96 · 12288² ≈ 173.95 B
        (175, TransformerShape(97, 12416)),
        (196608 * 27 / 1e9, TransformerShape(3, 384)),  # an exact cube is not rounded up by float error
        (1e-6, TransformerShape(1, 128)),
    ],
)
def test_transformer_shape_from_the_parameter_count(params_b: float, shape: TransformerShape) -> None:
    assert transformer_shape(params_b) == shape


@pytest.mark.parametrize("params_b", [0, -1])
def test_transformer_shape_needs_parameters(params_b: float) -> None:
    with pytest.raises(ValueError, match="params_b must be positive"):
        transformer_shape(params_b)


@pytest.mark.parametrize(
    ("params_b", "dtype", "context", "batch"),
    [
        (7, Dtype.BF16, 4096, 1),
        (7, Dtype.BF16, 4096, 8),
        (7, Dtype.FP8, 8192, 2),
        (70, Dtype.INT4, 2048, 4),
        (1.5, Dtype.FP16, 512, 1),
    ],
)
def test_inference_is_weights_plus_kv_cache_plus_overhead(
    params_b: float, dtype: Dtype, context: int, batch: int
) -> None:
    shape = transformer_shape(params_b)
    result = estimate_inference(params_b, dtype, context, batch, margin=0.1)
    assert result.weights_mib == math.ceil(params_b * 1e9 * BYTES_PER_PARAM[dtype] / MIB)
    kv_bytes = 2 * shape.layers * shape.d_model * context * batch * kv_cache_bytes_per_value(dtype)
    assert result.kv_cache_mib == math.ceil(kv_bytes / MIB)
    assert result.overhead_mib == 1024
    assert (result.gradients_mib, result.optimizer_mib, result.activations_mib) == (0, 0, 0)
    assert result.total_mib == math.ceil((result.weights_mib + result.kv_cache_mib + result.overhead_mib) * 1.1)


@pytest.mark.parametrize(("params_b", "context", "batch"), [(7, 4096, 1), (7, 2048, 8), (70, 4096, 1), (0.5, 128, 1)])
def test_training_is_16_bytes_per_parameter_plus_activations(params_b: float, context: int, batch: int) -> None:
    shape = transformer_shape(params_b)
    result = estimate_training(params_b, context, batch, margin=0.0)
    params = params_b * 1e9
    assert result.weights_mib == math.ceil(params * 2 / MIB)
    assert result.gradients_mib == math.ceil(params * 2 / MIB)
    assert result.optimizer_mib == math.ceil(params * 12 / MIB)
    assert result.activations_mib == math.ceil((2 * shape.layers + 34) * shape.d_model * context * batch / MIB)
    assert result.kv_cache_mib == 0
    assert result.total_mib == result.subtotal_mib


def test_the_7b_example_reads_like_the_portal_shows_it() -> None:
    result = estimate(ModelProfile(params_b=7, dtype=Dtype.BF16, context=4096, batch=1), 0.10)
    assert result.weights_mib == 13352
    assert result.kv_cache_mib == 2178
    assert result.describe() == "weights 13.0 GiB + KV cache 2.1 GiB + overhead 1.0 GiB + 10 % margin = 17.8 GiB"
    assert result.total_mib == math.ceil((13352 + 2178 + 1024) * 1.1)
    assert result.total_gib == result.total_mib / 1024


def test_training_breakdown_lists_its_parts() -> None:
    result = estimate(ModelProfile(params_b=7, mode=ModelMode.TRAINING), 0.0)
    assert [label for label, _ in result.parts()] == [
        "weights",
        "gradients",
        "optimizer states",
        "activations",
        "overhead",
    ]
    assert "margin" not in result.describe()


@pytest.mark.parametrize(
    ("model", "mode_estimate"),
    [
        (ModelProfile(params_b=7, mode=ModelMode.INFERENCE), lambda: estimate_inference(7, Dtype.BF16, 4096, 1, 0.1)),
        (ModelProfile(params_b=7, mode=ModelMode.TRAINING), lambda: estimate_training(7, 4096, 1, 0.1)),
        (
            ModelProfile(params_b=3, dtype=Dtype.FP8, context=1024, batch=4),
            lambda: estimate_inference(3, Dtype.FP8, 1024, 4, 0.1),
        ),
    ],
)
def test_estimate_dispatches_on_the_mode(model: ModelProfile, mode_estimate) -> None:  # type: ignore[no-untyped-def]
    assert estimate(model, 0.1) == mode_estimate()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: estimate_inference(7, Dtype.BF16, 0, 1, 0.1), "context and batch must be positive"),
        (lambda: estimate_inference(7, Dtype.BF16, 4096, -1, 0.1), "context and batch must be positive"),
        (lambda: estimate_training(7, 4096, 1, -0.1), "safety margin cannot be negative"),
    ],
)
def test_nonsense_sizes_are_refused(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        call()


def test_an_estimate_is_a_frozen_value() -> None:
    result = MemoryEstimate(weights_mib=100, margin=0.5)
    assert result.subtotal_mib == 1124
    assert result.total_mib == 1686
    with pytest.raises(AttributeError):
        result.weights_mib = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kind", "mode"),
    [("training", ModelMode.TRAINING), ("inference", ModelMode.INFERENCE), ("batch", ModelMode.INFERENCE)],
)
def test_the_kind_picks_the_memory_model(kind: str, mode: ModelMode) -> None:
    assert memory_model_for(JobKind(kind)) == mode


@pytest.mark.parametrize(
    ("kind", "mode", "refused"),
    [
        ("training", "inference", True),
        ("inference", "training", True),
        ("training", "training", False),
        ("inference", "inference", False),
        ("batch", "training", False),  # batch work may score or fine-tune
        ("batch", "inference", False),
    ],
)
def test_a_mode_that_contradicts_the_kind_is_named(kind: str, mode: str, refused: bool) -> None:
    conflict = memory_model_conflict(JobKind(kind), ModelMode(mode))
    assert (conflict is not None) == refused
    if conflict is not None:
        assert conflict.startswith(f"{mode} contradicts kind {kind}") and "leave model.mode out" in conflict


def test_the_explanation_names_the_memory_model() -> None:
    """13 B at 4 k tokens × 8, the issue's case: 234.6 GiB to train, 56.6 GiB to serve."""
    training = estimate(ModelProfile(params_b=13, batch=8, mode=ModelMode.TRAINING), 0.1)
    assert training.explain().startswith(
        "training memory model: weights + gradients + optimizer states + activations + overhead; weights 24.2 GiB"
    )
    assert training.mode == ModelMode.TRAINING and f"{training.total_gib:.1f}" == "234.6"
    serving = estimate(ModelProfile(params_b=13, batch=8), 0.1)
    assert f"{serving.total_gib:.1f}" == "56.6"
    assert serving.explain().startswith("inference memory model: weights + KV cache + overhead; weights 24.2 GiB")
