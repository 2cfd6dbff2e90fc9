"""Flow-matching policies over action chunks: velocity net, objectives, sampler, EMA, and the stochastic chains of
RL fine-tuning (ReinFlow's noisy chain, pi_RL's Flow-SDE chain)."""

from rslkit.models.flow.chain import ChainPolicy, FlowChain
from rslkit.models.flow.chunk_executor import ChunkExecutor
from rslkit.models.flow.ema import EMA
from rslkit.models.flow.noise_net import BoundedNoiseNet
from rslkit.models.flow.noisy_chain import NoisyFlowChain
from rslkit.models.flow.objectives import rectified_flow_loss, shortcut_loss
from rslkit.models.flow.policy import FlowPolicy, FlowPolicyCfg
from rslkit.models.flow.sampler import euler_sample, time_grid
from rslkit.models.flow.sde_chain import FlowSDEChain
from rslkit.models.flow.velocity_net import VelocityNet

__all__ = [
    "EMA",
    "BoundedNoiseNet",
    "ChainPolicy",
    "ChunkExecutor",
    "FlowChain",
    "FlowPolicy",
    "FlowPolicyCfg",
    "FlowSDEChain",
    "NoisyFlowChain",
    "VelocityNet",
    "euler_sample",
    "rectified_flow_loss",
    "shortcut_loss",
    "time_grid",
]
