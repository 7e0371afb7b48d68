"""Model attention specs (torch-free)."""
from attnkit.model.spec import DualChunkConfig, LayerAttention, MLAConfig, ModelAttention

__all__ = ["LayerAttention", "ModelAttention", "MLAConfig", "DualChunkConfig"]
