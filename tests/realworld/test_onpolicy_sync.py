"""At eta = 0 the asynchronous learner's update from transported rollouts is synchronous PPO's on the same data.

The reference is the synchronous runner's own PPO, fed through its own ``act`` / ``process_env_step`` path with the
actors' transported actions; both updates draw the same mini-batch permutation.
"""

from __future__ import annotations

import copy

import torch
from onpolicy_helpers import Loop, add_actor, learner
from transport_helpers import needs_netns

from rslkit.realworld.onpolicy_config import OnPolicyLearnerCfg
from rslkit.recipes import build_run

pytestmark = needs_netns
OVERRIDES = ["--agent.num_steps_per_env", "8"]
N = 8


def test_eta0_update_equals_synchronous_ppo() -> None:
    run = learner("point-reach", "ppo", OVERRIDES, OnPolicyLearnerCfg(0, 2, N, 30.0), iterations=1)
    start = copy.deepcopy(run.alg.state_dict())
    seen: list = []
    stack, update = run._stack, run._update
    run._stack = lambda rollouts: (seen.extend(rollouts), stack(rollouts))[1]
    run._update = lambda: (torch.manual_seed(123), update())[1]
    loop = Loop(run)
    try:
        for i in range(2):
            add_actor(loop, "point-reach", "ppo", OVERRIDES, N, i)
        run.learn()
    finally:
        loop.close()
    assert [r.rollout for r in seen] == [0, 1] and all(r.policy_version == 0 for r in seen)

    _, ref = build_run("point-reach", "ppo", OVERRIDES, num_envs=2 * N, seed=0)
    alg = ref.alg
    alg.load_state_dict(start)
    cat = {k: torch.cat([torch.from_numpy(r.step[k]) for r in seen], 1) for k in seen[0].step}
    obs = {g: torch.cat([torch.from_numpy(r.obs[g]) for r in seen], 1) for g in seen[0].obs}
    with torch.inference_mode():
        for t in range(8):
            o = ref.env.get_observations().clone()
            for g in obs:
                o[g] = obs[g][t]
            alg.act(o)
            value, params = alg._pending[3], alg._pending[4]  # the reference's own critic and distribution
            raw = cat["action"][t]
            log_prob = alg.policy.dist.log_prob(params, raw)
            assert torch.allclose(log_prob, cat["log_prob"][t], atol=1e-6), "behaviour log-probs differ at eta 0"
            assert torch.allclose(params[0], cat["params.0"][t], atol=1e-6)
            alg._pending = (o, raw, cat["log_prob"][t], value, params)
            alg.process_env_step(cat["reward"][t], cat["done"][t], {"time_outs": cat["time_out"][t]})
        last = ref.env.get_observations().clone()
        for g in obs:
            last[g] = obs[g][8]
        alg.compute_returns(last)
    torch.manual_seed(123)
    stats = alg.update()
    assert abs(stats["first_ratio"] - 1.0) < 1e-5
    ours, theirs = run.alg.policy.state_dict(), alg.policy.state_dict()
    worst = max(float((ours[k].float() - theirs[k].float()).abs().max()) for k in ours)
    assert worst < 1e-6, f"the asynchronous update differs from synchronous PPO by {worst}"
    assert run.alg.version == alg.version == 1
