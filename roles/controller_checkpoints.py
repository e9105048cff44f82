"""The controller's part in a checkpoint: it writes its own state, asks the generators,
reward ranks and critic ranks for theirs, and finalizes the checkpoint once every rank has answered."""

from __future__ import annotations

from roles.protocol import SaveState, StateSaved
from runtime import Envelope, handles


class CoordinatesCheckpoints:
    """A ``ControllerActor`` mixin (the trainers write their part before their ``StepDone``)."""

    def _begin_checkpoint(self, steps: int) -> None:
        """The trainers have written their part (before StepDone); write ours, ask the rest."""
        position = self._checkpoint_position(steps)
        self._positions = {s: p for s, p in self._positions.items() if s > steps}
        state = {"position": position, "next_eval_group": self.next_eval_group}
        path = self.checkpoints.write_controller_part(steps, state)
        asked = 0
        ranks = {"reward": self.routes.rewards, "critic": self.routes.critics}
        if not self.routes.colocated:
            ranks[self.routes.generate_role] = self.routes.generators
        for role, n in ranks.items():
            if n:
                self.mailbox.send_role(role, SaveState(steps_done=steps, path=str(path)))
                asked += n
        self._saving[steps] = asked
        if asked == 0:
            self._end_checkpoint(steps)

    @handles(StateSaved)
    def on_state_saved(self, env: Envelope) -> None:
        steps = env.msg.steps_done
        if steps not in self._saving:
            raise RuntimeError(f"{env.sender} saved checkpoint {steps}, which is not being written")
        self._saving[steps] -= 1
        if self._saving[steps] == 0:
            self._end_checkpoint(steps)

    def _end_checkpoint(self, steps: int) -> None:
        final = self.checkpoints.finalize(steps)
        del self._saving[steps]
        self.log.write(f"checkpoint: {final}")
        if self._finish_after_save and not self._saving:
            self._finish()
