"""Networks, action distributions and observation normalizers."""

from rslkit.models.actor_critic import ActorCritic, PolicyCfg
from rslkit.models.distributions import make_distribution
from rslkit.models.mlp import make_mlp
from rslkit.models.normalizer import EmpiricalNormalization

__all__ = ["ActorCritic", "EmpiricalNormalization", "PolicyCfg", "make_distribution", "make_mlp"]
