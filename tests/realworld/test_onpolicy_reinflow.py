"""ReinFlow over the wire: the actor sends whole noisy chains, so the learner's log-likelihood of a transported
chain under the same weights equals the actor's behaviour log-probability and the first ratio is 1."""

from __future__ import annotations

from pathlib import Path

import torch
from onpolicy_helpers import Loop, add_actor, flow_bc_checkpoint, learner
from transport_helpers import needs_netns

from rslkit.realworld.onpolicy_config import OnPolicyLearnerCfg

pytestmark = needs_netns


def test_reinflow_chain_survives_transport(tmp_path: Path) -> None:
    over = ["--agent.pretrained", flow_bc_checkpoint("pendulum", tmp_path / "bc.pt"), "--agent.num_steps_per_env", "3",
            "--agent.algorithm.critic_warmup_iterations", "0", "--agent.algorithm.num_mini_batches", "1"]  # fmt: skip
    run = learner("pendulum", "reinflow", over, OnPolicyLearnerCfg(0, 1, 4, 30.0), iterations=2)
    checks: list[tuple[torch.Tensor, torch.Tensor, dict[str, float]]] = []
    update = run._update

    def checked_update() -> dict[str, float]:
        st = run.alg.storage
        recomputed, behaviour = run.alg._proximal_log_probs(), st.log_probs.clone()
        stats = update()
        checks.append((recomputed, behaviour, stats))
        return stats

    run._update = checked_update
    loop = Loop(run)
    try:
        add_actor(loop, "pendulum", "reinflow", over, 4, 0)
        run.learn()
    finally:
        loop.close()
    assert len(checks) == 2 and run.alg.version == 2
    for recomputed, behaviour, stats in checks:
        assert torch.equal(recomputed, behaviour), float((recomputed - behaviour).abs().max())
        assert stats["first_ratio"] == 1.0 and stats["first_ratio_max_dev"] == 0.0
        assert stats["staleness_max"] == 0.0
