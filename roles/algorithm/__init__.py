"""The RL math on tensors: group advantages, GAE and the critic's value loss, the policy losses
(AIPO, GRPO) and the learner's log-probs of sampled responses.

Functions of arrays and a model's forward pass only: knows nothing of MPI, messages, actors or
how a step's data was collected (``roles.trainer`` feeds it).
"""
