"""The value model of the critic ranks: the policy's architecture with a scalar head."""
