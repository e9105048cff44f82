"""The RL logic of mpirl: controller, generator, reward and trainer roles."""
