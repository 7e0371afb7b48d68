"""Model attention specs (torch-free): what each layer needs, from configs and presets."""
from attnkit.model.config import parse_config
from attnkit.model.loader import load_model
from attnkit.model.presets import preset_config, preset_names
from attnkit.model.spec import DualChunkConfig, LayerAttention, MLAConfig, ModelAttention

__all__ = ["LayerAttention", "ModelAttention", "MLAConfig", "DualChunkConfig",
           "load_model", "parse_config", "preset_names", "preset_config"]
