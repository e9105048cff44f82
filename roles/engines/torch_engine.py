"""The plain-PyTorch generation engine: a Hugging Face causal LM driven by our own decode loop.

Why not ``model.generate``: the generator role needs, per sampled token, its log-probability
under the exact distribution it was drawn from (temperature and top-p applied), and it must
drop finished rows from the batch instead of padding them to the end. Both are a few lines in
a hand-written loop over ``model(..., past_key_values=cache)``, and the loop is at least as
fast as ``generate`` (``bench/generation.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch

from roles.engines.base import Sample, SamplingConfig
from roles.engines.kv_cache import preallocated_cache
from roles.engines.requests import Finished, Request, check_sampling
from roles.engines.torch_stream import ContinuousBatcher
from runtime.loop_clock import LOOP


class TorchEngine:
    """Engine (see ``roles.engines.base``) over a ``transformers`` causal LM.

    ``model`` is a directory (loaded with ``AutoModelForCausalLM``) or a model object, which
    is then used as is: weights are shared with the caller, not copied.

    A response ends at any of the model's EOS ids (``generation_config.json``, else
    ``config.json``) and ``stop_ids``: by default, for a directory, its tokenizer's EOS
    (``roles.models.tokenizer.eos_ids``), which ends a chat template's turn even where the model's
    config names another EOS; vLLM stops at both too.
    """

    def __init__(
        self,
        model: str | Path | torch.nn.Module,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | None = None,
        max_batch_rows: int = 512,
        quantization: str | None = None,
        stop_ids: Iterable[int] | None = None,
        capacity: int = 64,
        inflight_kv: str = "keep",
        seed: int = 0,
    ):
        if stop_ids is None and isinstance(model, (str, Path)):
            from roles.models.tokenizer import eos_ids

            stop_ids = eos_ids(str(model))
        if isinstance(model, (str, Path)):
            from roles.models.loading import load_complete

            model = load_complete(model, dtype or torch.float32)
        elif dtype is not None:
            model = model.to(dtype)
        self.model = model.to(device).eval()
        self.device = torch.device(device)
        self.max_batch_rows = max_batch_rows  # rows (prompts x n) decoded together; bounds KV memory
        cfg = self.model.config
        eos = self.model.generation_config.eos_token_id
        eos = cfg.eos_token_id if eos is None else eos
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        eos = list(dict.fromkeys([*eos, *(int(i) for i in stop_ids or ())]))  # the model's first: pad falls back to it
        self.eos_ids = torch.tensor(eos, dtype=torch.long, device=self.device)
        pad = cfg.pad_token_id if cfg.pad_token_id is not None else (eos[0] if eos else 0)
        self.pad_id = int(pad)  # only ever sits under a 0 in the attention mask
        self.dtype = next(self.model.parameters()).dtype  # what received weights are cast to
        # int8 weight-only linear layers (roles.engines.quantization), redone after each sync
        self.quant = None
        if quantization is not None:
            from roles.engines.quantization import Int8WeightOnly, check_scheme

            check_scheme(quantization)
            self.quant = Int8WeightOnly(self.model)
        self._params = dict(self.model.state_dict(keep_vars=True))
        self.version = 0  # the policy version of the weights held (streaming: what tokens record)
        # the streaming half (roles.engines.torch_stream), sharing this model
        self._stream = ContinuousBatcher(self, capacity, inflight_kv, seed)

    @classmethod
    def from_config(cls, engine, model, *, max_seqs: int, seed: int = 0, module=None, stop_ids=None) -> TorchEngine:
        """The engine of a role map's ``world.generator`` (``EngineConfig``) over its ``model:``,
        or over ``module`` (colocated: sample with the caller's module, shared, not copied)."""
        from roles.models import torch_dtype
        from roles.models.tokenizer import eos_ids

        if stop_ids is None:
            stop_ids = eos_ids(model.path)
        stream = dict(capacity=engine.max_seqs or max(max_seqs, 1), inflight_kv=engine.inflight_kv, seed=seed)
        if module is None and model.lora is not None:  # the base, with adapters the syncs fill
            from roles.models.loading import load_complete
            from roles.models.lora import inject_lora

            base = load_complete(model.path, torch_dtype(engine.dtype or model.dtype))
            module = inject_lora(base, model.lora, inference=True)
        if module is not None:
            return cls(module, stop_ids=stop_ids, **stream)
        return cls(
            model.path,
            dtype=torch_dtype(engine.dtype or model.dtype),
            quantization=engine.quantization,
            stop_ids=stop_ids,
            **stream,
        )

    # ------------------------------------------------------------------ StreamingEngine

    @property
    def capacity(self) -> int:
        return self._stream.capacity

    def add(self, request: Request) -> None:
        self._stream.add(request)

    def step(self) -> list[Finished]:
        return self._stream.step()

    def abort(self, tag: int) -> int:
        return self._stream.abort(tag)

    def unfinished(self) -> int:
        return self._stream.unfinished()

    # ------------------------------------------------------------------ Engine protocol

    def generate(self, prompts: list[np.ndarray], n: int, sampling: SamplingConfig) -> list[list[Sample]]:
        rows = [np.asarray(p) for p in prompts for _ in range(n)]
        gen = None
        if sampling.seed is not None:
            gen = torch.Generator(self.device).manual_seed(sampling.seed)
        samples: list[Sample] = []
        for start in range(0, len(rows), self.max_batch_rows):
            samples += self._sample(rows[start : start + self.max_batch_rows], sampling, gen)
        return [samples[i * n : (i + 1) * n] for i in range(len(prompts))]

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int | None = None) -> None:
        """Copy tensors into the model's own parameters, in place, by Hugging Face name.

        Each tensor is checked and copied as it arrives (a weight stream need not fit in memory
        twice), so a bad name or shape raises after the earlier tensors were already copied.
        No KV cache outlives a ``generate`` call; sequences streaming through the engine go on
        (their KV kept or recomputed: ``inflight_kv``), their next tokens recording ``version``.
        """
        with torch.no_grad():
            for name, tensor in named_tensors:
                if self.quant is not None and self.quant.owns(name):
                    self.quant.load(name, tensor, self.dtype)
                    continue
                param = self._params.get(name)
                if param is None:
                    raise KeyError(f"load_weights: unknown parameter {name!r}")
                if tuple(param.shape) != tuple(tensor.shape):
                    raise ValueError(
                        f"load_weights: {name!r} has shape {tuple(tensor.shape)}, the model's is {tuple(param.shape)}"
                    )
                param.copy_(tensor)
            if self.quant is not None:
                self.quant.requantize()
        self.version = self.version + 1 if version is None else version
        self._stream.weights_changed()

    # ------------------------------------------------------------------ decode loop

    @torch.inference_mode()
    def _sample(
        self,
        prompts: list[np.ndarray],
        sampling: SamplingConfig,
        gen: torch.Generator | None,
        min_new_tokens: int = 0,
    ) -> list[Sample]:
        _check_request(prompts, sampling)
        logits, cache, mask, lens = self._prefill(prompts, room=sampling.max_new_tokens)
        out = _Responses(len(prompts), sampling.max_new_tokens, self.pad_id, self.device)
        self._decode(logits, mask, lens.to(self.device), cache, out, sampling, gen, min_new_tokens)
        return out.samples()

    def _prefill(self, sequences: list[np.ndarray], room: int = 0):
        """One forward over ``sequences``, left-padded: their last logits, a cache holding their
        KV with ``room`` columns to spare, the padding mask and each sequence's length."""
        ids, mask, lens = self._left_padded(sequences)
        # Left padding: each row's real tokens take positions 0..len-1, as they would alone.
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = preallocated_cache(self.model.config, ids.shape[1] + room)
        logits = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=pos,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]
        return logits, cache, mask, lens

    def _left_padded(self, prompts: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The prompts as one batch, padded on the left (on the device), its mask, and each prompt's length."""
        lens = torch.tensor([len(p) for p in prompts], dtype=torch.long)
        width = int(lens.max())
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.as_tensor(p, dtype=torch.long)
            mask[i, width - len(p) :] = 1
        return ids.to(self.device), mask.to(self.device), lens

    def _decode(self, logits, mask, next_pos, cache, out: _Responses, sampling, gen, min_new_tokens: int) -> None:
        """Sample token by token into ``out``, from the prompts' last ``logits`` on."""
        T = sampling.max_new_tokens
        live = torch.arange(mask.shape[0], device=self.device)  # original row of each batch row still decoding
        for t in range(T):
            LOOP.tick()  # a long generation is progress, step by step (runtime.liveness)
            tok, lp = _pick(logits, sampling, self.eos_ids if t < min_new_tokens else None, gen)
            out.ids[live, t] = tok
            out.logprobs[live, t] = lp
            done = torch.isin(tok, self.eos_ids)
            if t == T - 1:
                out.stopped[live[done]] = True
                break
            if done.any():
                out.lengths[live[done]] = t + 1
                out.stopped[live[done]] = True
                # Drop finished rows from the batch and the cache: they cost nothing from here on.
                keep = (~done).nonzero().squeeze(1)
                if keep.numel() == 0:
                    break
                live, tok, mask, next_pos = live[keep], tok[keep], mask[keep], next_pos[keep]
                cache.batch_select_indices(keep)
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
            logits = self.model(
                input_ids=tok[:, None],
                attention_mask=mask,
                position_ids=next_pos[:, None],
                past_key_values=cache,
                use_cache=True,
            ).logits[:, -1]
            next_pos = next_pos + 1


def _check_request(prompts: list[np.ndarray], sampling: SamplingConfig) -> None:
    check_sampling(sampling)
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")


class _Responses:
    """What one decode call samples, per prompt row: tokens, their log-probs, the length, and
    whether EOS ended it ("stop") or ``max_new_tokens`` did ("length")."""

    def __init__(self, rows: int, max_new_tokens: int, pad_id: int, device: torch.device):
        self.ids = torch.full((rows, max_new_tokens), pad_id, dtype=torch.long, device=device)
        self.logprobs = torch.zeros((rows, max_new_tokens), dtype=torch.float32, device=device)
        self.lengths = torch.full((rows,), max_new_tokens, dtype=torch.long, device=device)
        self.stopped = torch.zeros((rows,), dtype=torch.bool, device=device)

    def samples(self) -> list[Sample]:
        ids = self.ids.to(torch.int32).cpu().numpy()
        logprobs = self.logprobs.cpu().numpy()
        lengths, stopped = self.lengths.cpu().numpy(), self.stopped.cpu().numpy()
        return [
            Sample(
                response_ids=ids[i, : lengths[i]].copy(),
                logprobs=logprobs[i, : lengths[i]].copy(),
                finish_reason="stop" if stopped[i] else "length",
            )
            for i in range(len(ids))
        ]


def _pick(
    logits: torch.Tensor,
    sampling: SamplingConfig,
    banned: torch.Tensor | None,
    gen: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row; return it and its log-prob under the distribution sampled from.

    Temperature 0 is greedy decoding (evaluation): the most likely token, with its log-prob
    under the unscaled softmax (no distribution was sampled from; nobody trains on these).
    """
    logits = logits.float()
    if sampling.temperature > 0:
        logits = logits / sampling.temperature
    if banned is not None:  # min_new_tokens: EOS is not allowed yet (as HF's logits processor)
        logits[:, banned] = float("-inf")
    logp = torch.log_softmax(logits, dim=-1)
    if sampling.temperature == 0:
        tok = logp.argmax(dim=-1, keepdim=True)
        return tok.squeeze(1), logp.gather(-1, tok).squeeze(1)
    if sampling.top_p < 1.0:
        # Nucleus: the smallest set of most likely tokens whose mass reaches top_p (the most
        # likely token always stays), renormalised so the log-probs are those sampled from.
        sorted_lp, order = logp.sort(dim=-1, descending=True)
        probs = sorted_lp.exp()
        mass_before = probs.cumsum(dim=-1) - probs
        sorted_lp = sorted_lp.masked_fill(mass_before >= sampling.top_p, float("-inf"))
        logp = torch.full_like(logp, float("-inf")).scatter(-1, order, sorted_lp)
        logp = logp - torch.logsumexp(logp, dim=-1, keepdim=True)
    tok = torch.multinomial(logp.exp(), 1, generator=gen)
    return tok.squeeze(1), logp.gather(-1, tok).squeeze(1)
