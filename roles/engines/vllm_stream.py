"""The vLLM engine's request-level side (``roles.engines.requests.StreamingEngine``).

``VllmStreaming`` is mixed into ``VllmEngine``: it drives the in-process ``LLMEngine`` one
request at a time (``add_request`` / ``step`` / ``abort_request``) instead of ``LLM.generate``,
so each sample comes back in the ``step`` it ends in.

- One vLLM request per sample. Sample ``j`` of request ``tag`` is the n=1 vLLM request
  ``f"{tag}:{j}"`` seeded ``sample_seed(seed, j)``: it ends, and is reported, on its own, and it
  draws the same numbers whatever else is in the batch (vLLM gives a seeded request a generator
  of its own). Greedy (temperature 0) with n > 1, which vLLM refuses, is just n greedy requests.
- Per-token versions. Outputs are ``RequestOutputKind.DELTA``: each ``step`` says which tokens
  each request produced in it, and they carry the version the engine held during that step.
  Log-probs are the batch path's behaviour log-probs (``processed_logprobs``, flat).
- Updates in flight. ``load_weights`` with requests running cannot reset the prefix cache (vLLM
  refuses while blocks are in use), so every request is salted with the version it was added
  under (``cache_salt``, hashed into its first KV block and so into every later one): a request
  of a newer version never matches a block computed with older weights. The reset happens as soon
  as the engine is idle. Requests that have not sampled a token yet are resubmitted under the new
  salt (same seed: nothing was drawn), whatever the policy. Then ``inflight_kv``:
  ``keep`` lets the others decode on over their old KV; ``recompute`` aborts them and adds each
  again as prompt + tokens so far (new salt, the remaining token budget, seed
  ``sample_seed(sample seed, tokens so far)``), so vLLM prefills it afresh with the new weights;
  the tokens already sampled keep their log-probs and versions (old weights sampled them).
- LoRA adapters through vLLM's own LoRA (``vllm_lora``): every request carries the adapters of
  the version it is added under; an update loads the new ones into the same slot, in place, so
  ``keep`` and ``recompute`` mean what they mean with a full reload.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from roles.engines.base import Sample, SamplingConfig
from roles.engines.requests import INFLIGHT_KV, Finished, Request, check_request, sample_seed
from runtime.loop_clock import LOOP


@dataclass
class _Sequence:
    """One sample in flight: what it was asked for and what it has produced so far."""

    tag: int
    index: int
    prompt: list[int]
    sampling: SamplingConfig
    seed: int | None  # the sample's own seed (sample_seed of the request's)
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)

    def sample(self, finish_reason: str) -> Sample:
        return Sample(
            response_ids=np.asarray(self.tokens, dtype=np.int32),
            logprobs=np.asarray(self.logprobs, dtype=np.float32),
            finish_reason=finish_reason,
            versions=np.asarray(self.versions, dtype=np.int32),
        )


class VllmStreaming:
    """Request-level streaming over ``self._llm.llm_engine`` (mixed into ``VllmEngine``)."""

    _llm: object
    config: object  # VllmEngine.Config: max_num_seqs, inflight_kv

    def _init_streaming(self) -> None:
        if self.config.inflight_kv not in INFLIGHT_KV:
            raise ValueError(f"inflight_kv must be 'keep' or 'recompute', got {self.config.inflight_kv!r}")
        self.capacity = self.config.max_num_seqs
        self.version = 0
        self._sequences: dict[str, _Sequence] = {}  # by vLLM request id, f"{tag}:{index}"
        self._ended: list[Finished] = []  # ended while draining before an update; the next step's
        self._reset_pending = False  # an update found requests running: reset the cache when idle

    # ------------------------------------------------------------------ StreamingEngine

    def add(self, request: Request) -> None:
        """Queue ``request``'s ``n`` samples, each its own vLLM request."""
        check_request(request)
        if any(s.tag == request.tag for s in self._sequences.values()):
            raise ValueError(f"request tag {request.tag} is already in flight")
        prompt = np.asarray(request.prompt_ids, dtype=np.int64).tolist()
        seed = request.sampling.seed
        for j in range(request.n):
            sample = _Sequence(request.tag, j, prompt, request.sampling, None if seed is None else sample_seed(seed, j))
            self._submit(sample, sample.seed)

    def step(self) -> list[Finished]:
        """One vLLM engine step; the samples that ended in it (or while draining before an update)."""
        ended, self._ended = self._ended, []
        if self._sequences:
            ended += self._absorb(self._llm.llm_engine.step())
            LOOP.tick()
        self._reset_if_idle()
        return ended

    def abort(self, tag: int) -> int:
        """Drop request ``tag``'s unfinished samples; how many were dropped."""
        ids = [rid for rid, s in self._sequences.items() if s.tag == tag]
        if ids:
            self._llm.llm_engine.abort_request(ids)
        for rid in ids:
            del self._sequences[rid]
        self._ended = [f for f in self._ended if f.tag != tag]  # ended but not yet handed out
        self._reset_if_idle()
        return len(ids)

    def unfinished(self) -> int:
        return len(self._sequences)

    # ------------------------------------------------------------------ around a weight update

    def _before_reload(self) -> None:
        """Make every token computed with the old weights known before they change.

        Without async scheduling (CPU) each ``LLMEngine.step`` returns the tokens of the batch it
        ran, so there is nothing left to collect. With it (vLLM's default on GPUs) a batch launched
        in the last step is still in the engine core's queue: its tokens were computed with the
        old weights but would be reported after the update. Pause scheduling and step until no
        scheduled batch is left, recording those tokens under the old version. (GPU only: vLLM's
        CPU platform turns async scheduling off, so the CPU tests never reach past the return.)
        """
        core = getattr(self._llm.llm_engine.engine_core, "engine_core", None)  # in-process EngineCore
        queue = getattr(core, "batch_queue", None)
        if not self._sequences or not queue:
            return
        from vllm.v1.core.sched.interface import PauseState

        launched = lambda: any(out.total_num_scheduled_tokens for _, out, _ in queue)  # noqa: E731
        core.scheduler.set_pause_state(PauseState.PAUSED_ALL)  # steps schedule nothing new
        try:
            for _ in range(core.batch_queue_size + 1):  # each step returns the oldest batch
                if not launched():
                    break
                self._ended += self._absorb(self._llm.llm_engine.step())
        finally:
            core.scheduler.set_pause_state(PauseState.UNPAUSED)
        if launched():
            raise RuntimeError("vLLM still has a batch in flight after draining its batch queue")

    def _after_reload(self) -> None:
        """New weights are in (``self.version`` is theirs): no stale KV for what runs next."""
        if not self._sequences:
            if not self._llm.reset_prefix_cache():
                raise RuntimeError("vLLM refused to reset its prefix cache (requests still running?)")
            self._reset_pending = False
            return
        recompute = self.config.inflight_kv == "recompute"
        again = {rid: s for rid, s in self._sequences.items() if recompute or not s.tokens}
        if again:
            self._llm.llm_engine.abort_request(list(again))
        # All requests aborted (recompute): nothing holds a block, so the reset can happen now.
        self._reset_pending = True
        if len(again) == len(self._sequences):
            self._reset_if_idle(force=True)
        for s in again.values():
            seed = s.seed if s.seed is None or not s.tokens else sample_seed(s.seed, len(s.tokens))
            self._submit(s, seed)

    # ------------------------------------------------------------------ helpers

    def _submit(self, s: _Sequence, seed: int | None) -> None:
        """Add ``s`` to vLLM as prompt + its tokens so far, for the tokens it has left."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        params = SamplingParams(
            n=1,
            temperature=s.sampling.temperature,
            top_p=s.sampling.top_p,
            max_tokens=s.sampling.max_new_tokens - len(s.tokens),
            logprobs=0,  # the sampled token's log-prob, processed (the batch path's mu)
            flat_logprobs=True,
            detokenize=False,
            seed=seed,
            output_kind=RequestOutputKind.DELTA,  # per step: the tokens it produced in that step
        )
        engine = self._llm.llm_engine
        prompt = TokensPrompt(prompt_token_ids=s.prompt + s.tokens, cache_salt=f"v{self.version}")
        (rendered,) = engine.renderer.render_cmpl([prompt])  # as LLM.generate prepares its prompts
        rid = f"{s.tag}:{s.index}"
        engine.add_request(rid, rendered, params, lora_request=self._lora_request())
        self._sequences[rid] = s

    def _absorb(self, outputs) -> list[Finished]:
        """Record one engine step's outputs under the current version; the samples that ended."""
        ended = []
        for out in outputs:
            s = self._sequences.get(out.request_id)
            if s is None:  # aborted since
                continue
            (c,) = out.outputs
            ids, logprobs = sampled_tokens(c)
            s.tokens += ids.tolist()
            s.logprobs += logprobs.tolist()
            s.versions += [self.version] * len(ids)
            if c.finish_reason is not None:
                reason = finish_reason(c, f"sample {out.request_id}")
                del self._sequences[out.request_id]
                ended.append(Finished(s.tag, s.index, s.sample(reason)))
        return ended

    def _lora_request(self):
        """The adapters of the version held, for vLLM's LoRA (``vllm_lora``); None: none there."""
        return getattr(getattr(self, "adapters", None), "request", None)

    def _reset_if_idle(self, force: bool = False) -> None:
        """Drop the prefix cache an in-flight update had to leave, once no request holds a block."""
        if self._reset_pending and (force or not self._sequences) and self._llm.reset_prefix_cache():
            self._reset_pending = False

    def _check_idle(self) -> None:
        """For the batch path: ``LLM.generate`` steps the shared engine until *every* request ends
        (ours included, whose outputs it would swallow), and its prompts are unsalted."""
        if self._sequences:
            raise RuntimeError(f"generate() with {len(self._sequences)} streaming samples in flight")
        self._reset_if_idle()
        if self._reset_pending:
            raise RuntimeError("vLLM refused to reset its prefix cache after an in-flight update")


def sampled_tokens(c) -> tuple[np.ndarray, np.ndarray]:
    """The tokens a vLLM completion output holds (a whole sample, or the ones a DELTA output
    adds) and their behaviour log-probs: flat log-probs, position i's entries from
    start_indices[i], the sampled token's first."""
    ids = np.asarray(c.token_ids, dtype=np.int32)
    if not len(ids):
        return ids, np.zeros(0, np.float32)
    flat = c.logprobs
    starts = np.asarray(flat.start_indices, dtype=np.int64)
    if len(starts) != len(ids) or np.any(np.asarray(flat.token_ids)[starts] != ids):
        raise RuntimeError("vLLM returned log-probs that do not line up with the sampled tokens")
    return ids, np.asarray(flat.logprobs, dtype=np.float32)[starts]


def finish_reason(c, which: str) -> str:
    """``c``'s finish reason, "stop" or "length"; anything else (an abort) raises."""
    if c.finish_reason not in ("stop", "length"):
        raise RuntimeError(f"vLLM finished {which} with {c.finish_reason!r} (aborted request?)")
    return c.finish_reason
