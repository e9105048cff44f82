"""The RL math on tensors: group advantages, GAE and the critic's value loss, the policy losses
(AIPO, PPO-clip, decoupled PPO), the mismatch corrections, loss aggregation, KL estimators and the
learner's log-probs of sampled responses (docs/algorithms.md).

Functions of arrays and a model's forward pass only: knows nothing of MPI, messages, actors or
how a step's data was collected (``roles.trainer`` feeds it).
"""
