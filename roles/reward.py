"""Reward rank: scores each rollout group and sends it on.

The groups that have arrived by the time the loop turns to ``step()`` are scored together, a
step's in one call to the scorer: their samples are pipelined into the worker processes
instead of one round trip per group, which matters when many generators finish at once.

Training groups go to their trainer, with a ``Scored`` notice of what was seen (rewards, their
components, response lengths, clipped and all-equal groups) to the controller. Evaluation
groups go back to the controller only, as ``EvalScored``: no trainer ever sees them.
The rank finds each group's example (answer, metadata) in its own copy of the task, by id.
Verifiers run in worker processes (``roles.rewards.sandbox``), so a reward that hangs, even
inside C code, is cut at ``reward.timeout_s`` and scores 0; learned rewards (a reward model,
a judge, a server: ``roles.rewards.learned``) run in this rank, over every group of the call
at once (``roles.rewards.scoring`` adds the two up).
"""

from __future__ import annotations

import collections
import time

import numpy as np

from roles.checkpoint.reward_state import save_reward_state
from roles.dynamic_sampling import all_equal
from roles.episodes.metrics import episode_bonus, episode_failed, episode_sums, final_turn
from roles.observe.samples import shown_record, shown_samples
from roles.protocol import (
    CONTROLLER,
    TRAIN,
    EvalScored,
    ForwardsStopSignals,
    Rollout,
    Routes,
    SavesRandomStates,
    SaveState,
    Scored,
)
from roles.rewards.overlong import overlong_penalty
from roles.rewards.scoring import GroupToScore
from roles.sections.reward import RewardSection
from roles.stream_protocol import GroupReady, SlotAssigned
from roles.tasks.prompts import messages_of
from runtime import Actor, Envelope, handles


class RewardActor(ForwardsStopSignals, SavesRandomStates, Actor):
    Config = RewardSection  # the role map's reward: section

    def __init__(
        self, mailbox, routes: Routes, tokenizer, task, scorer, *, prompts_per_step=1, shown_per_step=0, overlong=None
    ):
        """``scorer``: a ``RewardScoring`` (``score(groups) -> results``, ``state_dict()``,
        ``close()``) built from this rank's ``RewardActor.Config``; ``task``: the run's task,
        where answers and prompt messages are found by id.
        ``shown_per_step``: generations per step to show (``logging.samples_per_step``), picked
        by ``roles.observe.samples`` from each group's position among ``prompts_per_step``.
        ``overlong``: (max_length, buffer, weight) of ``reward.overlong`` (None: no length penalty)."""
        super().__init__(mailbox)
        self.routes = routes
        self.tokenizer = tokenizer
        self.task = task
        self.scorer = scorer
        self.prompts_per_step = prompts_per_step
        self.shown_per_step = shown_per_step
        self.overlong = overlong
        self._arrived: list[Rollout] = []  # not yet scored, in the order they came
        self._awaiting_slot: dict[int, tuple] = {}  # dynamic sampling: ticket -> scored group, to send on
        self._last_notice = time.perf_counter()  # the start of the next Scored's window

    @handles(SaveState)
    def on_save_state(self, env: Envelope) -> None:
        # The learned rewards' running statistics go with the random states.
        save_reward_state(env.msg.path, self.mailbox.role_table.rank, self.scorer.state_dict())
        super().on_save_state(env)

    @handles(Rollout)
    def on_rollout(self, env: Envelope) -> None:
        self._arrived.append(env.msg)  # scored with the others that came meanwhile, in step()

    def step(self) -> bool:
        if self.scorer.collective_group is not None:
            return self._collective_turn(stopping=False)[0]
        if not self._arrived:
            return False
        self._score_arrived()
        return True

    def _collective_turn(self, stopping: bool) -> tuple[bool, bool]:
        """One turn in lockstep with the other reward ranks (a reward model sharded over them,
        ``roles.rewards.learned.sharded``): if any has groups, all score, in one call each.
        Returns (scored, every rank is stopping)."""
        work, all_stopping = self.scorer.agree(bool(self._arrived), stopping)
        if work:
            arrived, self._arrived = self._arrived, []
            self._score_together(arrived)
        return work, all_stopping

    def _score_arrived(self) -> None:
        """Scores the groups that have arrived, a step's at a time, oldest step first, so that a
        late group of step s never waits behind the scoring of step s + 1 (asynchronous mode,
        a slow verifier); each step's groups in one scorer call, then sent on in the order
        they came."""
        arrived, self._arrived = self._arrived, []
        by_step: dict[int, list[Rollout]] = {}
        for r in arrived:
            by_step.setdefault(r.step, []).append(r)
        for step in sorted(by_step):
            self._score_together(by_step[step])

    def _score_together(self, groups: list[Rollout]) -> None:
        t0 = time.perf_counter()
        with self.spans.span("score"):
            to_score = [self._to_score(r) for r in groups]
            results = self.scorer.score(to_score)
        # Each group is charged its samples' share of the call, so the groups' score_s still
        # add up to the time this rank spent scoring (the controller's reward utilisation).
        per_sample_s = (time.perf_counter() - t0) / max(1, sum(len(g.responses) for g in to_score))
        for r, g, group_results in zip(groups, to_score, results):
            self._send_scored(r, g.responses, group_results, per_sample_s * len(g.responses))

    def _to_score(self, r: Rollout) -> GroupToScore:
        example = self.task.example(r.example_id)
        # An episode's task reward is its final turn's (its earlier turns and tool results are not an answer).
        infos = r.episodes or [None] * len(r.response_ids)
        responses = self.tokenizer.batch_decode(
            [final_turn(ids, info).tolist() for ids, info in zip(r.response_ids, infos)], skip_special_tokens=True
        )
        return GroupToScore(
            example=example,
            messages=messages_of(example, self.task.config),
            prompt=self.tokenizer.decode(np.asarray(r.prompt_ids).tolist(), skip_special_tokens=True),
            responses=responses,
        )

    def _send_scored(self, r: Rollout, texts: list[str], results, score_s: float) -> None:
        """One group's rewards into its Rollout, on to its trainer (or, for evaluation, the
        controller), and the controller's notice of what was seen."""
        r.rewards = [res.score for res in results]
        if r.episodes is not None:
            results = self._with_episodes(r, results)
        if self.overlong is not None and r.purpose == TRAIN:
            self._with_length_penalty(r, results)
        r.timings["score_s"] = score_s
        if r.purpose == TRAIN and r.step < 0:  # dynamic sampling: its step (or its drop) comes first
            self._awaiting_slot[r.group_id] = (r, texts, results, score_s)
            tokens = sum(len(ids) for ids in r.response_ids)
            equal, reward_sum = all_equal(r.rewards), float(sum(r.rewards))
            ready = GroupReady(r.group_id, r.policy_version, tokens, all_equal=equal, reward_sum=reward_sum)
            self.mailbox.send(CONTROLLER, ready)
            return
        self._send_on(r, texts, results, score_s)

    @handles(SlotAssigned)
    def on_slot(self, env: Envelope) -> None:
        m: SlotAssigned = env.msg
        r, texts, results, score_s = self._awaiting_slot.pop(m.ticket)
        if m.step < 0:  # dropped: all-equal, or too stale for any step left
            return
        r.step, r.group_id = m.step, m.group_id
        self._send_on(r, texts, results, score_s)

    def _send_on(self, r: Rollout, texts: list[str], results, score_s: float) -> None:
        failures = sum(res.failures for res in results)
        timeouts = sum(1 for res in results if res.timed_out)
        lengths = [len(ids) for ids in r.response_ids]
        clipped = sum(1 for f in r.finish_reasons if f == "length")
        correct = [res.components.get("correct", 0.0) for res in results]
        if r.purpose != TRAIN:
            self.mailbox.send(
                CONTROLLER,
                EvalScored(
                    eval_round=r.eval_round,
                    example_id=r.example_id,
                    purpose=r.purpose,
                    policy_version=r.policy_version,
                    scores=r.rewards,
                    correct=correct,
                    lengths=lengths,
                    clipped=clipped,
                    failures=failures,
                    timeouts=timeouts,
                    score_s=score_s,
                ),
            )
            return
        self.mailbox.send(self.routes.scored_for(r.group_id), r)
        components: collections.Counter = collections.Counter()
        for res in results:
            components.update(res.components)
        self.mailbox.send(
            CONTROLLER,
            Scored(
                step=r.step,
                groups=1,
                score_s=score_s,
                failures=failures,
                timeouts=timeouts,
                samples=len(results),
                reward_sum=float(sum(r.rewards)),
                correct_sum=float(sum(correct)),
                components={k: float(v) for k, v in components.items()},
                length_sum=int(sum(lengths)),
                length_max=int(max(lengths, default=0)),
                clipped=clipped,
                zero_advantage_groups=int(all_equal(r.rewards)),
                window_s=self._notice_window(),
                episodes=episode_sums(r.episodes, r.loss_masks or r.response_ids) if r.episodes else {},
                shown=self._shown(r, texts, results),
            ),
        )

    def _notice_window(self) -> float:
        now = time.perf_counter()
        window, self._last_notice = now - self._last_notice, now
        return window

    def _with_episodes(self, r: Rollout, results) -> list:
        """The environment's own rewards added to the scores (an "environment" component), and
        an episode the environment failed scored 0."""
        out = []
        for k, (res, info) in enumerate(zip(results, r.episodes)):
            bonus = episode_bonus(info)
            res.components = {**res.components, "environment": bonus}
            if episode_failed(info):
                res.components = {key: 0.0 for key in res.components}
            r.rewards[k] = 0.0 if episode_failed(info) else res.score + bonus
            res.score = r.rewards[k]
            out.append(res)
        return out

    def _with_length_penalty(self, r: Rollout, results) -> None:
        """DAPO's soft over-length penalty added to each sample's score (an "overlong" component)."""
        max_length, buffer, weight = self.overlong
        for k, (res, ids) in enumerate(zip(results, r.response_ids)):
            penalty = weight * overlong_penalty(len(ids), max_length, buffer)
            res.components = {**res.components, "overlong": penalty}
            r.rewards[k] = res.score = r.rewards[k] + penalty

    def _shown(self, r: Rollout, texts: list[str], results) -> list[dict]:
        """The samples of this group that ``logging.samples_per_step`` shows, as samples.jsonl lines."""
        if not self.shown_per_step:
            return []
        position = r.group_id - r.step * self.prompts_per_step
        picked = shown_samples(position, self.prompts_per_step, len(texts), self.shown_per_step)
        if not picked:
            return []
        prompt = self.tokenizer.decode(np.asarray(r.prompt_ids).tolist(), skip_special_tokens=True)
        if r.episodes is not None:  # the whole episode, its turns and tool results, as the model saw it
            texts = [
                self.tokenizer.decode(np.asarray(ids).tolist(), skip_special_tokens=False) for ids in r.response_ids
            ]
        return [
            shown_record(
                step=r.step,
                example_id=r.example_id,
                group_id=r.group_id,
                sample=k,
                prompt=prompt,
                response=texts[k],
                reward=r.rewards[k],
                components=results[k].components,
                version=r.policy_version,
                finish=r.finish_reasons[k],
                notes=results[k].notes,
            )
            for k in picked
        ]

    def on_stop(self, reason: str) -> None:
        # Groups that came before the Stop are scored and sent on, as they would have been
        # had each been scored as it came; a sharded reward model's ranks keep scoring in
        # lockstep until all of them have stopped.
        if self.scorer.collective_group is not None:
            while True:
                work, all_stopping = self._collective_turn(stopping=True)
                if all_stopping and not work:
                    break
        elif self._arrived:
            self._score_arrived()
        self.scorer.close()
