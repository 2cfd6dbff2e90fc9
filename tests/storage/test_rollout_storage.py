"""Rollout mini-batches: every sample once per epoch, all fields of a sample from the same row."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rslkit.storage.rollout_storage import RolloutStorage

T, N = 5, 12


def _filled_storage() -> RolloutStorage:
    def obs_at(t: int) -> TensorDict:
        ids = torch.arange(N) + 100 * t  # sample id = 100 t + env
        return TensorDict(
            {
                "policy": ids[:, None].float().repeat(1, 3),
                "image": ids[:, None, None].float().expand(N, 2, 4).clone(),
                "ids": ids.clone(),  # int64: gathered apart from the packed float32 columns
            },
            batch_size=[N],
        )

    storage = RolloutStorage(T, obs_at(0), raw_dim=2, num_params=2, device=torch.device("cpu"))
    for t in range(T):
        ids = (torch.arange(N) + 100 * t).float()
        storage.add(
            obs_at(t), ids[:, None].repeat(1, 2), ids, ids + 0.25, ids, torch.zeros(N), (ids[:, None], -ids[:, None])
        )
    storage.returns, storage.advantages = storage.values + 1, storage.values * 2
    return storage


def test_mini_batches_cover_each_sample_once_per_epoch_with_aligned_fields() -> None:
    storage = _filled_storage()
    seen: list[torch.Tensor] = []
    batches = list(storage.mini_batches(num_mini_batches=3, num_epochs=2))
    assert len(batches) == 6
    for b in batches:
        ids = b.obs["ids"]
        assert ids.dtype == torch.int64 and b.obs["image"].shape == (20, 2, 4)
        f = ids.float()
        assert torch.equal(b.obs["policy"], f[:, None].repeat(1, 3))
        assert torch.equal(b.obs["image"], f[:, None, None].expand(20, 2, 4))
        assert torch.equal(b.actions, f[:, None].repeat(1, 2)) and torch.equal(b.log_probs, f)
        assert torch.equal(b.values, f + 0.25) and torch.equal(b.returns, f + 1.25)
        assert torch.equal(b.advantages, (f + 0.25) * 2)
        assert torch.equal(b.dist_params[0], f[:, None]) and torch.equal(b.dist_params[1], -f[:, None])
        seen.append(ids)
    everything = torch.sort(torch.cat(seen[:3])).values
    assert torch.equal(everything, torch.sort(torch.cat(seen[3:])).values)
    assert torch.equal(
        everything, torch.sort((torch.arange(N)[None] + 100 * torch.arange(T)[:, None]).flatten()).values
    )


def test_only_the_named_groups_are_stored() -> None:
    obs = TensorDict(
        {"policy": torch.ones(N, 3), "camera_front": torch.zeros(N, 8, 8, 3, dtype=torch.uint8)}, batch_size=[N]
    )
    storage = RolloutStorage(T, obs, raw_dim=2, num_params=2, device=torch.device("cpu"), groups=["policy"])
    assert list(storage.obs.keys()) == ["policy"]
    z = torch.zeros(N)
    storage.add(obs, torch.zeros(N, 2), z, z, z, z.bool(), (torch.zeros(N, 1), torch.zeros(N, 1)))
    assert storage.obs["policy"][0].eq(1).all()


def test_ppo_stores_only_the_groups_its_policy_reads() -> None:
    from rslkit.algorithms.ppo import PPO, PPOCfg
    from rslkit.models.actor_critic import ActorCritic, PolicyCfg

    obs = TensorDict(
        {"policy": torch.randn(N, 3), "camera_front": torch.zeros(N, 8, 8, 3, dtype=torch.uint8)}, batch_size=[N]
    )
    ppo = PPO(ActorCritic(obs, 2, PolicyCfg()), PPOCfg(), T, obs, "cpu")
    assert list(ppo.storage.obs.keys()) == ["policy"]
