"""PPO with an LSTM policy, trained data-parallel: one environment batch per
rank with its own seed, gradients all-reduced by DDP, checkpoints on rank 0.

The environment is a memory task ("cue recall"): the first observation
shows one of two cues, then come `--delay` blank steps, then a query; the
agent is rewarded 1 if it answers the cue it saw at the start. Without
memory the best return is 0.5 (a guess); a policy that learns to keep the
cue in its LSTM state approaches 1. The episode return is reported as a
metric, so the training's page shows it rising.

It uses the optional helper `cohort_train` (pip install ./sdk/python) for
its progress lines and checkpoints; under plain torchrun it runs the same.
"""

import argparse
import os

import cohort_train as ct
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

OBS, ACTIONS = 3, 2  # [cue A, cue B, query], answer A or B


class CueRecall:
    """A batch of independent episodes, stepped together."""

    def __init__(self, episodes, delay, generator):
        self.n, self.delay, self.g = episodes, delay, generator

    def reset(self):
        self.t = 0
        self.cue = torch.randint(0, ACTIONS, (self.n,), generator=self.g)
        obs = torch.zeros(self.n, OBS)
        obs[torch.arange(self.n), self.cue] = 1.0
        return obs

    @property
    def length(self):
        return self.delay + 2

    def step(self, action):
        """Returns (observation, reward, done)."""
        self.t += 1
        reward = torch.zeros(self.n)
        if self.t == self.length:
            reward = (action == self.cue).float()
            return torch.zeros(self.n, OBS), reward, True
        obs = torch.zeros(self.n, OBS)
        if self.t == self.length - 1:
            obs[:, 2] = 1.0  # the query
        return obs, reward, False


class Policy(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.embed = nn.Linear(OBS, hidden)
        self.lstm = nn.LSTM(hidden, hidden, batch_first=True)
        self.pi = nn.Linear(hidden, ACTIONS)
        self.v = nn.Linear(hidden, 1)

    def forward(self, obs, state=None):
        """obs: [batch, time, OBS] -> logits [b, t, A], values [b, t], state."""
        h, state = self.lstm(torch.relu(self.embed(obs)), state)
        return self.pi(h), self.v(h).squeeze(-1), state


def rollout(env, policy, generator):
    """One batch of whole episodes, acting step by step with the LSTM state."""
    obs, state = env.reset(), None
    all_obs, actions, logps, values, rewards = [], [], [], [], []
    with torch.no_grad():
        for _ in range(env.length):
            logits, value, state = policy(obs.unsqueeze(1), state)
            dist_t = torch.distributions.Categorical(logits=logits[:, 0])
            action = torch.multinomial(dist_t.probs, 1, generator=generator).squeeze(1)
            all_obs.append(obs)
            actions.append(action)
            logps.append(dist_t.log_prob(action))
            values.append(value[:, 0])
            obs, reward, done = env.step(action)
            rewards.append(reward)
            if done:
                break
    stack = lambda xs: torch.stack(xs, dim=1)  # noqa: E731
    return stack(all_obs), stack(actions), stack(logps), stack(values), stack(rewards)


def advantages(rewards, values, gamma=0.99, lam=0.95):
    """GAE over complete episodes (the value after the last step is 0)."""
    adv = torch.zeros_like(rewards)
    last = torch.zeros(rewards.shape[0])
    for t in reversed(range(rewards.shape[1])):
        next_value = values[:, t + 1] if t + 1 < rewards.shape[1] else torch.zeros_like(last)
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        last = delta + gamma * lam * last
        adv[:, t] = last
    return adv, adv + values


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=60)
    p.add_argument("--episodes", type=int, default=64, help="episodes per rank per iteration")
    p.add_argument("--delay", type=int, default=4)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--clip", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--checkpoint-every", type=int, default=10)
    args = p.parse_args()

    dist.init_process_group(backend="gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)  # the same initial policy everywhere
    policy = Policy()
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.lr)
    start = 0
    resume = ct.resume_dir()
    if resume:
        state = torch.load(resume / "policy.pt")
        policy.load_state_dict(state["policy"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["iteration"]
        print(f"rank {rank}: resuming from {resume} at iteration {start}", flush=True)
    model = DDP(policy)
    # Each rank its own environment and sampling stream, by its seed.
    env_gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    act_gen = torch.Generator().manual_seed(args.seed * 1000 + 500 + rank)
    env = CueRecall(args.episodes, args.delay, env_gen)
    print(f"rank {rank} of {world}: PPO, {args.episodes} episodes per iteration, seed {args.seed * 1000 + rank}",
          flush=True)

    for it in range(start + 1, args.iterations + 1):
        obs, actions, old_logp, values, rewards = rollout(env, policy, act_gen)
        adv, returns = advantages(rewards, values)
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        for _ in range(args.epochs):
            logits, value, _ = model(obs)
            dist_t = torch.distributions.Categorical(logits=logits)
            ratio = torch.exp(dist_t.log_prob(actions) - old_logp)
            surrogate = torch.min(ratio * adv, ratio.clamp(1 - args.clip, 1 + args.clip) * adv)
            entropy = dist_t.entropy().mean()
            loss = -surrogate.mean() + 0.5 * (returns - value).pow(2).mean() - 0.01 * entropy
            optimizer.zero_grad()
            loss.backward()  # DDP all-reduces the gradients across ranks
            nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
            optimizer.step()
        # The mean episode return over every rank's episodes: a real all-reduce.
        episode_return = rewards.sum(dim=1).mean()
        dist.all_reduce(episode_return)
        episode_return = (episode_return / world).item()
        ct.report(it, total_steps=args.iterations, loss=loss.item(),
                  episode_return=episode_return, entropy=entropy.item())
        if it % args.checkpoint_every == 0 or it == args.iterations:
            ct.save_checkpoint(it, lambda d: torch.save(
                {"iteration": it, "policy": policy.state_dict(),
                 "optimizer": optimizer.state_dict()}, d / "policy.pt"))
            dist.barrier()
    ct.finish(args.iterations, loss=loss.item(), episode_return=episode_return)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
