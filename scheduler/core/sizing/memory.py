"""GPU memory a model needs per replica: the memory-profile estimator behind ``model`` requests.

Every figure is in MiB (2**20 bytes) and rounded up; a :class:`MemoryEstimate` keeps the parts so the portal
can show *why* a job got the slice it got ("weights 13.0 GiB + KV cache 16.5 GiB + overhead 1.0 GiB + 10 %
margin = 33.5 GiB").

Formulas (all per replica):

- Bytes per parameter by dtype: bf16/fp16 2, fp8/int8 1, int4 0.5 (the storage width of the number format).
- Transformer shape from the parameter count: a decoder block holds ≈ 12·d² parameters (4·d² attention,
  8·d² MLP; Kaplan et al. 2020, "Scaling Laws", N ≈ 12·n_layer·d_model²), and common models keep
  d_model ≈ 128 × n_layer (Llama-2 7B: 32 × 4096, 13B: 40 × 5120; GPT-3 175B: 96 × 12288). Hence
  ``layers = ceil(cbrt(N / (12 · 128²)))`` and ``d_model = 128 · layers`` (rounding up only overstates).
- Inference = weights + KV cache + overhead.
  - weights = N × bytes/param.
  - KV cache = 2 (K and V) × layers × kv_heads × head_dim × context × batch × KV bytes. We take
    kv_heads × head_dim = d_model (multi-head attention): the upper bound, since grouped-query models
    (Llama-3, Mistral) need 4–8× less; a user who knows better states ``memory_gib``. The cache is kept
    at 16 bits (2 bytes) except for fp8 deployments, which keep an fp8 cache (1 byte): weight-only int8/int4
    quantisation (GPTQ/AWQ) leaves activations and the cache at 16 bits.
  - overhead = 1 GiB: CUDA context (≈ 0.3–0.5 GiB), cuBLAS/cuDNN workspaces, allocator slack and the
    transient activations of one forward pass.
- Training = weights + gradients + optimizer states + activations + overhead, for mixed-precision Adam:
  16 bytes per parameter in all (ZeRO, Rajbhandari et al. 2020, §3.1): 16-bit weights (2) and gradients
  (2), and fp32 master weights, momentum and variance (4 + 4 + 4 = 12). The same 16 bytes apply whatever
  the dtype: fp8 training keeps higher-precision masters, and quantised dtypes are not trained in full.
  - activations, with activation checkpointing (what large-model training uses): each layer keeps its
    16-bit input, 2·s·b·h bytes, and one layer at a time is recomputed in full, 34·s·b·h bytes
    (Korthikanti et al. 2022, "Reducing Activation Recomputation", with flash attention): so
    ``(2 · layers + 34) · context · batch · d_model`` bytes.
  - overhead = 1 GiB as above.
- The policy's safety margin (``Policy.memory_safety_margin``, 10 %) is added on top of the sum.

Which of the two a model is sized by is its ``mode``; a job spec that leaves it out gets the one its kind
implies (:func:`memory_model_for`): a training job is sized for training, so a lead who only picks "training"
is not handed an inference-sized slice that runs out of memory at the first optimizer step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from scheduler.core.model.snapshot import ModelProfile
from scheduler.core.model.vocabulary import Dtype, JobKind, ModelMode

MIB = 1 << 20
BYTES_PER_PARAM: dict[Dtype, float] = {
    Dtype.BF16: 2.0,
    Dtype.FP16: 2.0,
    Dtype.FP8: 1.0,
    Dtype.INT8: 1.0,
    Dtype.INT4: 0.5,
}
HEAD_WIDTH_PER_LAYER = 128  # d_model / n_layer of common decoder models
PARAMS_PER_LAYER_PER_D2 = 12  # a decoder block holds ≈ 12·d_model² parameters
RUNTIME_OVERHEAD_MIB = 1024  # CUDA context + workspaces + transient activations
TRAINING_BYTES_PER_PARAM = 16  # mixed-precision Adam (ZeRO §3.1): 2 weights + 2 grads + 12 optimizer
TRAINING_WEIGHT_BYTES = 2
TRAINING_GRADIENT_BYTES = 2
TRAINING_OPTIMIZER_BYTES = TRAINING_BYTES_PER_PARAM - TRAINING_WEIGHT_BYTES - TRAINING_GRADIENT_BYTES
ACTIVATION_BYTES_PER_LAYER_TOKEN_D = 2  # checkpointed layer input, 16-bit
ACTIVATION_BYTES_RECOMPUTED_LAYER = 34  # one layer's full activations (Korthikanti et al. 2022)
# The parts each memory model sums, as the suggestion names them.
MEMORY_MODEL_PARTS: dict[ModelMode, str] = {
    ModelMode.INFERENCE: "weights + KV cache + overhead",
    ModelMode.TRAINING: "weights + gradients + optimizer states + activations + overhead",
}


def memory_model_for(kind: JobKind) -> ModelMode:
    """The memory model a job of ``kind`` is sized by when its spec does not say: training jobs hold gradients
    and optimizer states; serving and batch work (offline scoring) hold weights and a KV cache."""
    return ModelMode.TRAINING if JobKind(kind) == JobKind.TRAINING else ModelMode.INFERENCE


def memory_model_conflict(kind: JobKind, mode: ModelMode) -> str | None:
    """Why ``mode`` cannot size a job of ``kind``, or None. Batch work may be either (scoring or fine-tuning);
    training and inference jobs must use their own model, since the other one is off by a factor of ~4."""
    kind, mode = JobKind(kind), ModelMode(mode)
    if kind == JobKind.BATCH or memory_model_for(kind) == mode:
        return None
    return (
        f"{mode} contradicts kind {kind}: a {kind} job is sized by the {memory_model_for(kind)} memory model "
        f"({MEMORY_MODEL_PARTS[memory_model_for(kind)]}); leave model.mode out or set it to {memory_model_for(kind)}"
    )


@dataclass(frozen=True, slots=True)
class TransformerShape:
    layers: int
    d_model: int


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """The parts of one replica's memory need, in MiB; zero parts did not apply (no KV cache in training)."""

    weights_mib: int
    kv_cache_mib: int = 0
    gradients_mib: int = 0
    optimizer_mib: int = 0
    activations_mib: int = 0
    overhead_mib: int = RUNTIME_OVERHEAD_MIB
    margin: float = 0.0  # fraction added on top of the parts
    mode: ModelMode = ModelMode.INFERENCE  # the memory model the parts come from

    @property
    def subtotal_mib(self) -> int:
        return (
            self.weights_mib
            + self.kv_cache_mib
            + self.gradients_mib
            + self.optimizer_mib
            + self.activations_mib
            + self.overhead_mib
        )

    @property
    def total_mib(self) -> int:
        """What the replica is right-sized to: the parts plus the safety margin, rounded up."""
        return math.ceil(self.subtotal_mib * (1 + self.margin))

    @property
    def total_gib(self) -> float:
        return self.total_mib / 1024

    def parts(self) -> tuple[tuple[str, int], ...]:
        """The non-zero parts as ``(label, MiB)``, in the order they are explained."""
        labelled = (
            ("weights", self.weights_mib),
            ("KV cache", self.kv_cache_mib),
            ("gradients", self.gradients_mib),
            ("optimizer states", self.optimizer_mib),
            ("activations", self.activations_mib),
            ("overhead", self.overhead_mib),
        )
        return tuple((label, mib) for label, mib in labelled if mib)

    def describe(self) -> str:
        """E.g. ``"weights 13.0 GiB + KV cache 16.5 GiB + overhead 1.0 GiB + 10 % margin = 33.5 GiB"``."""
        terms = [f"{label} {mib / 1024:.1f} GiB" for label, mib in self.parts()]
        if self.margin:
            terms.append(f"{self.margin * 100:g} % margin")
        return f"{' + '.join(terms)} = {self.total_gib:.1f} GiB"

    def explain(self) -> str:
        """``describe()`` naming the memory model, e.g. ``"training memory model: weights + gradients + optimizer
        states + activations + overhead; weights 26.0 GiB + … = 234.6 GiB"``."""
        return f"{self.mode} memory model: {MEMORY_MODEL_PARTS[self.mode]}; {self.describe()}"


def transformer_shape(params_b: float) -> TransformerShape:
    """Layers and width of a standard decoder with ``params_b`` billion parameters (module docstring)."""
    if params_b <= 0:
        raise ValueError(f"params_b must be positive, not {params_b!r}")
    per_layer_cubed = PARAMS_PER_LAYER_PER_D2 * HEAD_WIDTH_PER_LAYER**2
    layers = max(1, math.ceil((params_b * 1e9 / per_layer_cubed) ** (1 / 3) - 1e-9))
    return TransformerShape(layers=layers, d_model=HEAD_WIDTH_PER_LAYER * layers)


def kv_cache_bytes_per_value(dtype: Dtype) -> int:
    """Width of one cached K or V value: fp8 deployments keep an fp8 cache, everything else 16 bits."""
    return 1 if dtype == Dtype.FP8 else 2


def _mib(n_bytes: float) -> int:
    return math.ceil(n_bytes / MIB)


def estimate_inference(params_b: float, dtype: Dtype, context: int, batch: int, margin: float) -> MemoryEstimate:
    """Weights + KV cache + overhead for serving; raises ValueError for non-positive sizes."""
    _check_sizes(context, batch, margin)
    shape = transformer_shape(params_b)
    weights = params_b * 1e9 * BYTES_PER_PARAM[Dtype(dtype)]
    kv_cache = 2 * shape.layers * shape.d_model * context * batch * kv_cache_bytes_per_value(Dtype(dtype))
    return MemoryEstimate(weights_mib=_mib(weights), kv_cache_mib=_mib(kv_cache), margin=margin)


def estimate_training(params_b: float, context: int, batch: int, margin: float) -> MemoryEstimate:
    """Weights + gradients + Adam states + checkpointed activations + overhead (module docstring)."""
    _check_sizes(context, batch, margin)
    shape = transformer_shape(params_b)
    params = params_b * 1e9
    per_token_d = (
        ACTIVATION_BYTES_PER_LAYER_TOKEN_D * shape.layers + ACTIVATION_BYTES_RECOMPUTED_LAYER
    ) * shape.d_model
    return MemoryEstimate(
        weights_mib=_mib(params * TRAINING_WEIGHT_BYTES),
        gradients_mib=_mib(params * TRAINING_GRADIENT_BYTES),
        optimizer_mib=_mib(params * TRAINING_OPTIMIZER_BYTES),
        activations_mib=_mib(per_token_d * context * batch),
        margin=margin,
        mode=ModelMode.TRAINING,
    )


@lru_cache(maxsize=4096)  # a static fact of the model's shape: no cycle changes it, no switch turns it off
def estimate(model: ModelProfile, margin: float) -> MemoryEstimate:
    """The estimate for ``model`` in its own mode (inference or training) with ``margin`` added."""
    if ModelMode(model.mode) == ModelMode.TRAINING:
        return estimate_training(model.params_b, model.context, model.batch, margin)
    return estimate_inference(model.params_b, model.dtype, model.context, model.batch, margin)


def _check_sizes(context: int, batch: int, margin: float) -> None:
    if context <= 0 or batch <= 0:
        raise ValueError(f"context and batch must be positive, not {context!r} and {batch!r}")
    if margin < 0:
        raise ValueError(f"the safety margin cannot be negative: {margin!r}")
