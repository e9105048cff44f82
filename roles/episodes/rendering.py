"""Token-exact turns: the ids of an episode's opening and of each observation, from the chat template.

An episode's sequence is the prompt, then each model turn exactly as sampled, then the ids of
the observation that follows it, appended turn by turn; nothing is ever re-tokenised from
text. So the trainer sees the tokens the generator sampled, whatever the template would do to
a whole conversation rendered at once (a thinking model's template that strips earlier
reasoning, a turn separator it writes after the end-of-turn token).

The observation's ids are what the template writes after a model turn's end-of-turn token up
to the next generation prompt: the separator after that token (Qwen's "\\n"), the observation
messages and the generation prompt. They are cut out of a probe conversation rendered with the
same tools: a user message, a model turn of marker text, then the observations. The model's
own turn is never rendered, so how the template treats earlier turns does not matter here.

Not known here: environments, engines, episodes' bookkeeping (``roles.episodes.episode``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# Marker texts no real conversation holds: where the probe's turns are in the rendered text.
_PROBE_USER = "\u27e6mpirl probe question\u27e7"
_PROBE_TURN = "\u27e6mpirl probe turn\u27e7"


class TemplateError(ValueError):
    """A chat template that cannot render token-exact episodes; the message says how to fix it."""


class TurnRenderer:
    """Renders an episode's opening and observations into ids with one tokenizer's chat template.

    ``tools``: the environment's function specs (``tools=`` of the template); ``end_ids``:
    the ids that end a model turn (the engine's stop ids); ``where`` names the model in errors.
    """

    def __init__(
        self,
        tokenizer,
        tools: Sequence[Mapping[str, Any]] = (),
        end_ids: Sequence[int] = (),
        template_kwargs: Mapping[str, Any] | None = None,
        where: str = "the model",
    ):
        self.tokenizer = tokenizer
        self.tools = [dict(t) for t in tools] or None
        self.kwargs = dict(template_kwargs or {})
        self.where = where
        ends = list(end_ids) or [tokenizer.eos_token_id]
        self.end_ids = frozenset(int(i) for i in ends if i is not None)
        if not self.end_ids:
            raise TemplateError(f"{where}: the tokenizer has no EOS token, so a model turn has no end to find")
        self.end_texts = [tokenizer.decode([i], skip_special_tokens=False) for i in sorted(self.end_ids)]
        if not getattr(tokenizer, "chat_template", None):
            raise TemplateError(
                f"{where}: the tokenizer has no chat template; episodes need one that renders "
                "observation messages (add one to tokenizer_config.json, or use a chat model)"
            )
        if self.tools:
            self._check_renders_tools()

    def render(self, messages: Sequence[Mapping[str, Any]], generation_prompt: bool) -> str:
        try:
            return self.tokenizer.apply_chat_template(
                [dict(m) for m in messages],
                tools=self.tools,
                tokenize=False,
                add_generation_prompt=generation_prompt,
                **self.kwargs,
            )
        except Exception as e:  # noqa: BLE001 - the template's own words, with who and what
            roles = ", ".join(str(m.get("role")) for m in messages)
            raise TemplateError(
                f"{self.where}: the chat template refused messages with roles [{roles}]: {type(e).__name__}: {e}"
            ) from None

    def encode(self, text: str) -> np.ndarray:
        # The template writes every special token itself: nothing added here.
        return np.asarray(self.tokenizer(text, add_special_tokens=False)["input_ids"], dtype=np.int32)

    def opening_ids(self, messages: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """The prompt: ``messages`` rendered with the tools and the generation prompt."""
        return self.encode(self.render(messages, generation_prompt=True))

    def observation_text(self, observations: Sequence[Mapping[str, Any]]) -> str:
        """What the template writes after a model turn's end token, through the observations,
        up to and including the next generation prompt."""
        probe = [{"role": "user", "content": _PROBE_USER}, {"role": "assistant", "content": _PROBE_TURN}]
        text = self.render(probe + [dict(m) for m in observations], generation_prompt=True)
        at = text.find(_PROBE_TURN)
        if at < 0:
            raise TemplateError(
                f"{self.where}: the chat template drops the assistant's content when observations follow it; "
                "episodes cannot be rendered with it"
            )
        after = at + len(_PROBE_TURN)
        # The end token must close the turn itself (only blanks between), not a later message.
        ends = [(text.find(e, after), e) for e in self.end_texts if e and text.find(e, after) >= 0]
        ends = [(i, e) for i, e in ends if not text[after:i].strip()]
        if not ends:
            shown = ", ".join(repr(e) for e in self.end_texts)
            raise TemplateError(
                f"{self.where}: the chat template writes none of the end-of-turn tokens ({shown}) after an "
                "assistant turn, so where a sampled turn ends cannot be matched to the template; "
                "set generation_config.json's eos_token_id to the token the template closes turns with"
            )
        start, end = min(ends)
        return text[start + len(end) :]

    def observation_ids(self, observations: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """The ids appended after a model turn that ended with an end-of-turn token."""
        return self.encode(self.observation_text(observations))

    def turn_text(self, ids: np.ndarray) -> str:
        """A model turn as the environment reads it: its text, without the end-of-turn token."""
        ids = np.asarray(ids).tolist()
        if ids and ids[-1] in self.end_ids:
            ids = ids[:-1]
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def _check_renders_tools(self) -> None:
        """Refuse a template that ignores ``tools=``: the model would never see its tools."""
        probe = [{"role": "user", "content": _PROBE_USER}]
        with_tools = self.render(probe, generation_prompt=True)
        self.tools, tools = None, self.tools
        try:
            without = self.render(probe, generation_prompt=True)
        finally:
            self.tools = tools
        names = [str(t.get("function", t).get("name", "")) for t in tools]
        if with_tools == without or not all(n in with_tools for n in names):
            raise TemplateError(
                f"{self.where}: the chat template does not render tools (tools= changes nothing, or leaves out "
                f"{', '.join(names)}); use the model's tool-calling template (chat_template in "
                "tokenizer_config.json, e.g. Qwen2.5's) or describe the tools in task.system_prompt"
            )
