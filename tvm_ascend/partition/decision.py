"""Re-export: partition code spells ``from .decision import Decision``."""
from ..decision import Decision

__all__ = ["Decision"]
