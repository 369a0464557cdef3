"""Models: presets (which pair), loading (dtype, device, quantization), the LRU cache of loaded models,
and where SmolLM2-135M-Instruct comes from (``smollm2``). The names below are the layer's public face."""

from specdemo.models import smollm2  # noqa: F401
from specdemo.models.cache import (  # noqa: F401
    DEFAULT_CACHE,
    LoadedModel,
    ModelCache,
    Pair,
    draft_options_for,
    load_pair,
    preload_presets,
)
from specdemo.models.loading import (  # noqa: F401
    DTYPES,
    HUB_ID,
    QUANTIZATIONS,
    LoadOptions,
    check_prompt,
    check_same_vocabulary,
    configure_cpu_threads,
    describe_load_failure,
    encode_prompt,
    hub_reachable,
    load_model,
    quantization_config,
    resolve_device,
    resolve_dtype,
)
from specdemo.models.presets import (  # noqa: F401
    ASSETS,
    BUNDLED_DRAFT,
    BUNDLED_TARGET,
    INSTRUCT_PROMPTS,
    PRESETS,
    PROMPTS,
    QWEN_PROMPTS,
    SMOLLM2_DRAFT,
    SMOLLM2_FEATURE,
    STORY_OPENINGS,
    Preset,
    default_preset_name,
    default_preset_notice,
    lowercases,
    on_zero_gpu,
    smollm2_ready,
    startup_preset,
)
